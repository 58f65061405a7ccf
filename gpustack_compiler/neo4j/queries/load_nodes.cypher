// One batch of nodes of one label (the label comes from an allowlist; values are parameters).
// `SET n = row.props` replaces every property, so stale ones disappear; the marker is among them.
UNWIND $rows AS row
MERGE (n:__LABEL__ {name: row.name})
SET n = row.props
RETURN count(n) AS written, collect([n.name, elementId(n)]) AS ids
