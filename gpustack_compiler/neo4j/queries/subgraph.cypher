// What the resolver needs for a target: the target and its upstream cone (variables and
// constants), every relation that defines a variable in it, and every constraint touching it.
// Records are the manifest's own JSON, so both graph sources return identical dicts.
CALL () {
  MATCH (s:Variable {name: $name}) RETURN s
  UNION
  MATCH (s:Constant {name: $name}) RETURN s
}
OPTIONAL MATCH (s)<-[:FEEDS|DEFINES*]-(u)
WHERE u:Variable OR u:Constant
WITH s, collect(DISTINCT u) AS cone
WITH [s] + [u IN cone WHERE u <> s] AS members
CALL (members) {
  UNWIND members AS m
  MATCH (m)<-[:DEFINES|CONSTRAINS]-(r:Relation)
  RETURN collect(DISTINCT r) AS relations
}
RETURN [m IN members WHERE m:Variable | m.record] AS variables,
       [m IN members WHERE m:Constant | m.record] AS constants,
       [r IN relations | r.record] AS relations
