// One batch of relationships new to the graph, between nodes addressed by element id; the type comes
// from a parameter (a dynamic type), the marker is among the properties.
UNWIND $rows AS row
MATCH (a) WHERE elementId(a) = row.a
MATCH (b) WHERE elementId(b) = row.b
CREATE (a)-[e:$(row.type)]->(b)
SET e = row.props
RETURN count(e) AS written
