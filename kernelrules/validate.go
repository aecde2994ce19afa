package kernelrules

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// kmsgPath is the only log nodeward reads.
const kmsgPath = "/dev/kmsg"

// validate checks a decoded file and returns every problem, joined.
func validate(name string, file *File) error {
	var problems []error
	report := func(field string, err error) {
		problems = append(problems, &ParseError{File: name, Field: field, Err: err})
	}
	validateWatcher(file, report)
	declared := validateConditions(file.Conditions, report)
	if len(file.Rules) == 0 {
		report("rules", errors.New("no rules"))
	}
	for i, rule := range file.Rules {
		path := itemPath("rules", i, "reason", rule.Reason)
		validateRule(rule, declared, func(field string, err error) { report(path+"."+field, err) })
	}
	return errors.Join(problems...)
}

// validateWatcher checks the fields NPD hands to its log watcher.
func validateWatcher(file *File, report func(string, error)) {
	if file.Plugin != "" && file.Plugin != "kmsg" {
		report("plugin", fmt.Errorf("%q is not supported: nodeward reads the kernel log from %s only (plugin \"kmsg\")", file.Plugin, kmsgPath))
	}
	if file.LogPath != "" && file.LogPath != kmsgPath {
		report("logPath", fmt.Errorf("%q is not supported: nodeward reads the kernel log from %s only", file.LogPath, kmsgPath))
	}
	if len(file.SkipList) > 0 {
		report("skipList", errors.New("not supported: NPD applies skipList in its filelog plugin only, never to /dev/kmsg"))
	}
	checkDuration("lookback", file.Lookback, report)
	checkDuration("delay", file.Delay, report)
	if file.BufferSize < 0 || file.BufferSize > MaxBufferSize {
		report("bufferSize", fmt.Errorf("%d is out of range: want 1 to %d lines (0 means %d)", file.BufferSize, MaxBufferSize, DefaultBufferSize))
	}
	if strings.TrimSpace(file.Source) == "" {
		report("source", errors.New("empty: every match is reported with its source"))
	}
}

func checkDuration(field, value string, report func(string, error)) {
	if value == "" {
		return
	}
	d, err := time.ParseDuration(value)
	switch {
	case err != nil:
		report(field, fmt.Errorf("want a Go duration such as \"5m\": %w", err))
	case d < 0:
		report(field, fmt.Errorf("%q is negative", value))
	}
}

// validateConditions checks the declared conditions and returns their
// types, which permanent rules must name.
func validateConditions(conditions []Condition, report func(string, error)) map[string]bool {
	declared := make(map[string]bool, len(conditions))
	for i, condition := range conditions {
		path := itemPath("conditions", i, "type", condition.Type)
		switch {
		case strings.TrimSpace(condition.Type) == "":
			report(path+".type", errors.New("empty"))
		case declared[condition.Type]:
			report(path+".type", errors.New("declared twice"))
		}
		if strings.TrimSpace(condition.Reason) == "" {
			report(path+".reason", errors.New("empty: the healthy condition needs a reason"))
		}
		declared[condition.Type] = true
	}
	return declared
}

func validateRule(rule Rule, declared map[string]bool, report func(string, error)) {
	switch rule.Type {
	case Temporary:
	case Permanent:
		switch {
		case rule.Condition == "":
			report("condition", errors.New("empty: a permanent rule must name the condition it sets"))
		case !declared[rule.Condition]:
			report("condition", fmt.Errorf("%q is not declared in conditions", rule.Condition))
		}
	default:
		report("type", fmt.Errorf("%q is neither %q nor %q", rule.Type, Temporary, Permanent))
	}
	if strings.TrimSpace(rule.Reason) == "" {
		report("reason", errors.New("empty"))
	}
	if rule.Pattern == "" {
		report("pattern", errors.New("empty"))
		return
	}
	if _, err := compileAnchored(rule.Pattern); err != nil {
		report("pattern", err)
	}
}

// compileAnchored compiles a rule's pattern the way NPD matches it: the
// pattern as written with `\z` appended, so it must match up to the end of
// the buffered log. The pattern is compiled alone first so that a syntax
// error quotes it as the author wrote it.
func compileAnchored(pattern string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, err
	}
	anchored, err := regexp.Compile(pattern + `\z`)
	if err != nil {
		return nil, fmt.Errorf("compiling with the end anchor NPD appends: %w", err)
	}
	// A pattern that matches an empty line would match after every kernel
	// message, turning one rule into a flood of events.
	if anchored.MatchString("") {
		return nil, errors.New("matches an empty line, so it would match every message")
	}
	return anchored, nil
}

// fieldNames lists the JSON names of a struct's fields.
func fieldNames(value any) []string {
	t := reflect.TypeOf(value)
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, tag)
	}
	return names
}
