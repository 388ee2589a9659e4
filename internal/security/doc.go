// Package security is Gantry's outside probe, kept as tests: the attacks of
// the security review replayed against a real `gantry serve`, the way an
// attacker meets it.
//
// Its tests build the development binary (go build -tags dev ./cmd/gantry)
// once, run `gantry serve` as a subprocess on the embedded defaults (SQLite
// in a temporary directory, the in-process development OpenID provider, the
// local signed image registry, no cluster), sign in through the provider's
// password form like a browser, make personal access tokens through the API,
// and then try what an attacker would: open redirects after sign-in, tokens
// used past their narrowing, previews of what a launch refuses, undeclared
// /api paths, oversized and chunked bodies, duplicate JSON keys, quantities
// with huge exponents, forged and tampered JWTs, another team's workloads and
// notebooks, anonymous floods, deactivated users, revoked template versions,
// CSRF, template injection through parameters and huge or slow headers.
// Each case asserts the concrete outcome (status, problem, and that nothing
// changed or leaked); at the end the server is stopped, its log is searched
// for every secret the run handled, and `gantry audit verify` checks the
// audit log's hash chain and the checkpoints the server logged.
//
// Nothing else may import it: the package holds no production code, only
// this description.
package security
