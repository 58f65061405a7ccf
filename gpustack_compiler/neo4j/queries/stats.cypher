// Counts straight from the graph: systems, variables, constants, relations by kind, root inputs,
// leaves, references, and per system its variables, relations and roots.
CALL () { MATCH (s:System) RETURN count(s) AS systems }
CALL () { MATCH (v:Variable) RETURN count(v) AS variables }
CALL () { MATCH (c:Constant) RETURN count(c) AS constants }
CALL () { MATCH (r:Relation) RETURN count(r) AS relations }
CALL () { MATCH (r:Relation) WITH r.kind AS kind, count(*) AS n RETURN collect([kind, n]) AS by_kind }
CALL () { MATCH (v:Root) RETURN count(v) AS root_inputs }
CALL () { MATCH (v:Leaf) RETURN count(v) AS leaves }
CALL () { MATCH (r:Reference) RETURN count(r) AS references }
CALL () {
  MATCH (s:System)
  CALL (s) {
    OPTIONAL MATCH (v:Variable {system: s.name})
    RETURN count(v) AS system_variables, count(CASE WHEN v:Root THEN 1 END) AS system_roots
  }
  CALL (s) {
    OPTIONAL MATCH (r:Relation {system: s.name})
    RETURN count(r) AS system_relations
  }
  RETURN collect({system: s.name, variables: system_variables, relations: system_relations,
                  roots: system_roots}) AS by_system
}
RETURN systems, variables, constants, relations, by_kind, root_inputs, leaves, references, by_system
