// Package systemd speaks to the service manager: sd_notify (READY, STATUS,
// WATCHDOG, STOPPING) and reboots through logind over D-Bus.
package systemd
