// The one Build node of this compile (the previous one goes with the sweep).
CREATE (b:Build)
SET b = $props
RETURN count(b) AS written
