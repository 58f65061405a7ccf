// One batch of nodes the graph holds whose digest changed: `SET n = row.props` replaces every
// property, so stale ones disappear, and labels the compile no longer gives (a relation's old kind,
// Root, Debt10, ...) are removed.
UNWIND $rows AS row
MATCH (n) WHERE elementId(n) = row.id
WITH n, row, [l IN labels(n) WHERE NOT l IN row.labels] AS stale
REMOVE n:$(stale)
SET n = row.props
SET n:$(row.labels)
RETURN count(n) AS written
