// The build currently in the database, if any.
OPTIONAL MATCH (b:Build)
RETURN b.manifest_hash AS manifest_hash, b.gpustack_load AS load, b.loaded_by AS loaded_by
