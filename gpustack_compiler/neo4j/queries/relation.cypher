MATCH (r:Relation {name: $name}) RETURN r.record AS record
