// Root debt per family: a family's weight is the size of the UNION of its roots' downstream
// cones (a variable two roots of the family both move counts once). `heaviest`: its $top
// heaviest roots. $system: null for all, else roots of one system.
MATCH (r:Root)
WHERE $system IS NULL OR r.system = $system
OPTIONAL MATCH (r)-[:FEEDS|DEFINES*]->(x:Variable)
WITH coalesce(r.family, '(undeclared)') AS family, r, collect(DISTINCT x) AS cone
ORDER BY size(cone) DESC, r.name
WITH family, collect(r.name) AS roots, collect(cone) AS cones
CALL (cones) {
  UNWIND cones AS cone
  UNWIND cone AS x
  RETURN count(DISTINCT x) AS weight
}
RETURN family, weight, size(roots) AS roots, roots[0..$top] AS heaviest
ORDER BY weight DESC, family
