package auth

// ReasonOf is reasonOf for the tests of package auth_test.
var ReasonOf = reasonOf
