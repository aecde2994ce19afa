// Package deploy tests nodeward's install manifests against a real API
// server: both kustomize overlays pass a server-side dry run, and the agent's
// least-privilege RBAC plus the per-node ValidatingAdmissionPolicies hold for
// real bound service-account tokens. Everything lives in the tests; this file
// only documents the package.
package deploy
