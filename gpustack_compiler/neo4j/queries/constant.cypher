MATCH (c:Constant {name: $name}) RETURN c.record AS record
