package natspub

// BuildMsg is buildMsg, for the fuzz targets and the size checks.
var BuildMsg = buildMsg
