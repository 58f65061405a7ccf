// Every variable, constant and relation name.
CALL () {
  MATCH (v:Variable) RETURN v.name AS name
  UNION ALL
  MATCH (c:Constant) RETURN c.name AS name
  UNION ALL
  MATCH (r:Relation) RETURN r.name AS name
}
RETURN name ORDER BY name
