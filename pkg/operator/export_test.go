package operator

// TrimForCache is the informers' transform, for the tests in operator_test.
var TrimForCache = trimForCache
