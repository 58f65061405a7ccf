// Which of gpustack's constraints and indexes exist (schema.cypher runs only if one is missing).
SHOW INDEXES YIELD name WHERE name STARTS WITH 'gpustack_'
RETURN collect(name) AS names
