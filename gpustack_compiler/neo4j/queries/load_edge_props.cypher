// Relationships that stay but whose properties changed (an assignment's value, say): `SET e = row.props`
// replaces every property, so stale ones disappear.
UNWIND $rows AS row
MATCH ()-[e]->() WHERE elementId(e) = row.id
SET e = row.props
RETURN count(e) AS written
