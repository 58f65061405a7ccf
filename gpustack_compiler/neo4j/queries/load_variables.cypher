// One batch of variables. `SET v = row.props` replaces every property (the marker is among them);
// the extra labels (Root, Leaf, Sys_<system>, Debt<n>) of an earlier compile are removed and this
// compile's set (dynamic labels from parameters: nothing from the catalog is spliced into the text).
UNWIND $rows AS row
MERGE (v:Variable {name: row.name})
WITH v, row, [l IN labels(v) WHERE l <> 'Variable'] AS stale
REMOVE v:$(stale)
SET v = row.props
SET v:$(row.labels)
RETURN count(v) AS written, collect([v.name, elementId(v)]) AS ids
