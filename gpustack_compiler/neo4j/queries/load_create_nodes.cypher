// One batch of nodes new to the graph. Labels come from parameters (Cypher 5.26 dynamic labels: a
// label, a relation's kind, Root, Leaf, Sys_<system>, Debt<n>), so nothing from the catalog is spliced
// into query text; the marker is among the properties.
UNWIND $rows AS row
CREATE (n:$(row.labels))
SET n = row.props
RETURN count(n) AS written, collect([row.labels[0], n.name, elementId(n)]) AS ids
