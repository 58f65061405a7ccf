// What the database holds after a compile, checked before the transaction commits.
CALL () { MATCH (n) RETURN count(n) AS nodes }
CALL () { MATCH ()-[e]->() RETURN count(e) AS relationships }
CALL () { MATCH (n) WHERE n.gpustack_load IS NULL RETURN count(n) AS foreign }
RETURN nodes, relationships, foreign
