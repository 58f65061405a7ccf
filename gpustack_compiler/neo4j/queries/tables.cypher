// The manifest's tables (every top-level part that is not the graph), each stored whole as JSON.
MATCH (t:Table) RETURN t.name AS name, t.json AS json
