// Package api holds the nodeward.io API types, such as UpdatePool
// (api/v1alpha1), and nodeward's client for the built-in resources it uses
// (api/kube).
package api
