// Records of the variables among $names, in one round trip (names of no variable are left out).
UNWIND $names AS name
MATCH (v:Variable {name: name})
RETURN v.name AS name, v.record AS record
