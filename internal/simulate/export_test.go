package simulate

// CachedShare is cachedShare, for the package's external tests.
var CachedShare = cachedShare
