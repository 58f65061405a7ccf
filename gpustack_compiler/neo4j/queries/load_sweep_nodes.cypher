// Nodes of earlier compiles that this compile did not write: renamed or removed entries.
MATCH (n) WHERE n.gpustack_load IS NOT NULL AND n.gpustack_load <> $load
DETACH DELETE n
RETURN count(*) AS removed
