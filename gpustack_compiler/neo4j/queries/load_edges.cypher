// One batch of relationships of one type (from an allowlist), between nodes this transaction just
// wrote, addressed by element id: one statement per type whatever the labels at either end.
// `SET e = row.props` replaces every property (an assignment's value, say), so stale ones disappear.
UNWIND $rows AS row
MATCH (a) WHERE elementId(a) = row.a
MATCH (b) WHERE elementId(b) = row.b
MERGE (a)-[e:__TYPE__]->(b)
SET e = row.props, e.gpustack_load = $load
RETURN count(e) AS written
