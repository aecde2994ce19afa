// Package prom runs a real Prometheus and Alertmanager (the Debian packages
// prometheus and prometheus-alertmanager, /usr/bin/prometheus and
// /usr/bin/prometheus-alertmanager) on the loopback for tests, with Targets
// that serve the metrics the tests set. Nothing is faked: rules are
// evaluated, alerts fire and queries run as in a cluster, only faster (a
// scrape and an evaluation every second).
//
// Each process runs through test/cluster's Process, so that it dies with the
// test binary even after a panic or a timeout, and stops with its test's
// cleanup. Outside CI a missing binary skips the test (test/testenv); in CI
// it fails it.
package prom
