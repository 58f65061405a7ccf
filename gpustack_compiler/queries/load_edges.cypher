// One batch of relationships of one type between two labels (all three from an allowlist).
UNWIND $rows AS row
MATCH (a:__FROM__ {name: row.source})
MATCH (b:__TO__ {name: row.target})
MERGE (a)-[e:__TYPE__]->(b)
SET e.gpustack_load = $load
RETURN count(e) AS written
