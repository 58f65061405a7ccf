// Value-defining relations whose output is one of $names.
UNWIND $names AS name
MATCH (:Variable {name: name})<-[:DEFINES]-(r:Relation)
RETURN DISTINCT r.name AS name, r.record AS record
ORDER BY name
