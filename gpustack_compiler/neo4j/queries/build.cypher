// The compile the database holds (none: no gpustack graph yet).
MATCH (b:Build) RETURN b {.*} AS build
