// Downstream cone (blast radius) of a variable or constant: every variable that depends on it,
// with depth = the fewest relations crossed. Breadth-first, no path enumeration (see cone_upstream).
// $depth: null for the whole cone, else the most relations to cross.
CALL () {
  MATCH (s:Variable {name: $name}) RETURN s
  UNION
  MATCH (s:Constant {name: $name}) RETURN s
}
MATCH p = (s)-[:FEEDS|DEFINES*]->(u)
WHERE (u:Variable OR u:Constant) AND u <> s
WITH u, min(length(p)) / 2 AS depth
WHERE $depth IS NULL OR depth <= $depth
RETURN u.name AS name, depth
ORDER BY depth, name
