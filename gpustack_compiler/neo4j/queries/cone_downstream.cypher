// Downstream cone (blast radius) of a variable or constant: every variable that depends on it,
// with depth = the fewest relations crossed. Breadth-first, no path enumeration (see cone_upstream).
// $depth: null for the whole cone, else the most relations to cross.
// One row, the cone as two parallel lists (nearest first): one row per name costs the client
// far more than the query. No row: an unknown name.
CALL () {
  MATCH (s:Variable {name: $name}) RETURN s
  UNION
  MATCH (s:Constant {name: $name}) RETURN s
}
OPTIONAL MATCH p = (s)-[:FEEDS|DEFINES*]->(u)
WHERE (u:Variable OR u:Constant) AND u <> s
WITH s, u, min(length(p)) / 2 AS depth
WHERE u IS NULL OR $depth IS NULL OR depth <= $depth
WITH s, u, depth
ORDER BY depth, u.name
RETURN s.name AS start, collect(u.name) AS names, collect(depth) AS depths
