// Upstream cone of a variable or constant: every variable and constant it depends on, with
// depth = the fewest relations crossed (a relation is two hops: FEEDS in, DEFINES out).
// No path is enumerated: `p` appears only inside min(length(p)), which the planner answers with a
// breadth-first pruning expansion (VarLengthExpand(Pruning,BFS)) visiting each node once, however
// many diamonds the graph has. tests/test_neo4j_plans.py holds the plan to that.
// $depth: null for the whole cone, else the most relations to cross.
// One row, the cone as two parallel lists (nearest first): one row per name costs the client
// far more than the query. No row: an unknown name.
CALL () {
  MATCH (s:Variable {name: $name}) RETURN s
  UNION
  MATCH (s:Constant {name: $name}) RETURN s
}
OPTIONAL MATCH p = (s)<-[:FEEDS|DEFINES*]-(u)
WHERE (u:Variable OR u:Constant) AND u <> s
WITH s, u, min(length(p)) / 2 AS depth
WHERE u IS NULL OR $depth IS NULL OR depth <= $depth
WITH s, u, depth
ORDER BY depth, u.name
RETURN s.name AS start, collect(u.name) AS names, collect(depth) AS depths
