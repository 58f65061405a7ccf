// Nodes gpustack did not write (no marker property): a compile refuses to touch them unless forced.
MATCH (n) WHERE n.gpustack_load IS NULL
RETURN count(n) AS foreign, collect(DISTINCT labels(n))[0..5] AS sample_labels
