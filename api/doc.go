// Package api holds the nodeward.io API types, such as UpdatePool.
package api
