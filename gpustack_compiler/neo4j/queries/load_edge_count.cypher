// How many relationships the graph holds (from Neo4j's count store: no scan).
MATCH ()-[e]->() RETURN count(e) AS written
