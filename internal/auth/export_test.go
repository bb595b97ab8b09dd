package auth

// ReasonOf is reasonOf for the tests of package auth_test.
var ReasonOf = reasonOf

// AllowProcedure is allowProcedure, for the tests of package auth_test.
var AllowProcedure = allowProcedure

// InsecureDevIdentity is the identity of every caller under -insecure-dev.
var InsecureDevIdentity = Identity{Role: roleInsecureDev, Subject: "insecure-dev"}

// PolicyProcedures are the procedures the policy table has a rule for.
func PolicyProcedures() []string {
	out := make([]string, 0, len(policy))
	for p := range policy {
		out = append(out, p)
	}
	return out
}
