MATCH (v:Variable {name: $name}) RETURN v.record AS record
