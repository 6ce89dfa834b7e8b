// Package auth says who a caller is and keeps the node's credentials
// fresh: principals (a role and a name) read from a verified certificate
// or a bearer token, the node's certificate, key and CA reloaded from
// their files without a restart, the TLS configurations every listener
// and dialler of a node uses, and the token file.
//
// A certificate names its principal in a URI SAN cohort://<role>/<name>
// (cohort://node/n1, cohort://admin/alice, cohort://client/billing); a
// certificate without one may name it in its subject instead, the role as
// the organizational unit (OU) and the name as the common name (CN).
// Peers are verified by chain and principal, not by host name: a node's
// certificate is valid for any address the node is reached at, and what
// makes it a node is the CA that signed it and the role it names.
//
// It imports nothing of Cohort's and decides nothing about what a role
// may do: that is the rpc package's table.
package auth
