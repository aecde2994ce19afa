package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// logFlags are the persistent logging flags of every command. One logger
// serves nodeward's lines and client-go's (klog is routed into it).
type logFlags struct {
	format    enumFlag
	level     enumFlag
	verbosity int
}

func newLogFlags() logFlags {
	return logFlags{
		format: enumFlag{value: "text", allowed: []string{"text", "json"}},
		level:  enumFlag{value: "info", allowed: []string{"debug", "info", "warn", "error"}},
	}
}

func (f *logFlags) register(fs *pflag.FlagSet) {
	fs.Var(&f.format, "log-format", "log line format: text (logfmt) or json; the same for every command")
	fs.Var(&f.level, "log-level", "lowest level logged: debug, info, warn or error")
	fs.IntVarP(&f.verbosity, "v", "v", 0,
		"client-go (klog) verbosity as kubectl's -v: N logs client-go's messages up to V(N); N >= 4 also logs nodeward's debug lines")
}

// slogLevel is the handler's level: --log-level, lowered to -N by -v N so
// that klog's V(N) lines (slog level -N) pass.
func (f *logFlags) slogLevel() slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(f.level.value))
	if f.verbosity > 0 {
		l = min(l, slog.Level(-f.verbosity))
	}
	return l
}

// setup builds the logger writing to w and routes klog into it, with
// klog's verbosity following -v. klog's settings are process-wide: the
// last command run sets them.
func (f *logFlags) setup(w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: f.slogLevel()}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if f.format.value == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	log := slog.New(h)
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("v", strconv.Itoa(max(f.verbosity, 0))); err != nil {
		return nil, fmt.Errorf("set client-go log verbosity: %w", err)
	}
	klog.SetSlogLogger(log)
	return log, nil
}

// enumFlag is a string flag checked against its allowed values when it is
// parsed, so that a bad value is a usage error.
type enumFlag struct {
	value   string
	allowed []string
}

func (e *enumFlag) String() string { return e.value }
func (e *enumFlag) Type() string   { return "string" }
func (e *enumFlag) Set(v string) error {
	for _, a := range e.allowed {
		if v == a {
			e.value = v
			return nil
		}
	}
	return fmt.Errorf("want one of %v", e.allowed)
}
