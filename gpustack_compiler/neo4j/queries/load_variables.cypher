// One batch of variables. `SET v = row.props` replaces every property (the marker is among them);
// the Root and Leaf labels are reset here and set again by load_label for this compile.
UNWIND $rows AS row
MERGE (v:Variable {name: row.name})
SET v = row.props
REMOVE v:Root:Leaf
RETURN count(v) AS written, collect([v.name, elementId(v)]) AS ids
