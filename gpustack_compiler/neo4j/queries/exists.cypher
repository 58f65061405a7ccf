// Whether a variable or constant of this name exists (tells an empty cone from an unknown name).
CALL () {
  MATCH (s:Variable {name: $name}) RETURN s
  UNION
  MATCH (s:Constant {name: $name}) RETURN s
}
RETURN count(s) AS found
