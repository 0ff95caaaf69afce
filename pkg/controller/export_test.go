package controller

// SpecHash is specHash, for the external test that pins its values
// (spechash_pin_test.go).
var SpecHash = specHash
