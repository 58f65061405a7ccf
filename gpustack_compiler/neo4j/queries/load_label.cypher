// An extra label (Root, Leaf; from an allowlist) on nodes of one label, by name.
UNWIND $names AS name
MATCH (n:__NODE__ {name: name})
SET n:__LABEL__
RETURN count(n) AS written
