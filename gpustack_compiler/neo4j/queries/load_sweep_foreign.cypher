// Only with --force: nodes gpustack did not write are deleted, so the graph is gpustack's alone.
MATCH (n) WHERE n.gpustack_load IS NULL
DETACH DELETE n
RETURN count(*) AS removed
