// One batch of relations of one kind: the kind is a label as well (from an allowlist), and a
// relation whose kind changed since the last compile loses its old kind label (`__KINDS__`: all of them).
UNWIND $rows AS row
MERGE (r:Relation {name: row.name})
SET r = row.props
REMOVE r:__KINDS__
SET r:__KIND__
RETURN count(r) AS written, collect([r.name, elementId(r)]) AS ids
