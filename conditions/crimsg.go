package conditions

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// The runtime probe's four gRPC calls (CRI Status and Version, containerd's
// version service, the standard health check) carry messages of a few
// fields, encoded and decoded here with protowire rather than through the
// generated packages k8s.io/cri-api/pkg/apis/runtime/v1 and
// google.golang.org/grpc/health/grpc_health_v1. The generated CRI package
// registers every type of the CRI (hundreds of messages) at start-up:
// 228 KB allocated by its initializer (GODEBUG=inittrace=1) and about
// 320 KB of heap still live after a GC in a program that only imports it,
// in every agent process, for the five fields the probe reads
// (docs/benchmarks.md, agent RSS). Field numbers are the CRI's
// (api.proto, runtime.v1) and grpc.health.v1's (health.proto); the tests
// decode what the generated servers encode.

// rawMessage is a gRPC message already in its wire form.
type rawMessage []byte

// rawCodec sends and receives rawMessage as they are (grpc.ForceCodec).
// Its name is empty so that calls carry the content-type
// "application/grpc" exactly, as the generated clients' do: CRI-O serves
// gRPC and HTTP on one socket and tells them apart by that exact header
// (cmux), so "application/grpc+proto", which the name "proto" sent, had the
// connection closed ("connection reset by peer") and the probe never read a
// real CRI-O (test/node TestCRIONodeAgentRuntime). The server decodes with
// its proto codec either way.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(rawMessage)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot encode %T", v)
	}
	return m, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("raw codec: cannot decode into %T", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "" }

// invokeRaw calls method with an empty request (every request the probe
// sends has all its fields at their defaults) and returns the answer's
// wire bytes.
func invokeRaw(ctx context.Context, conn *grpc.ClientConn, method string, opts ...grpc.CallOption) (rawMessage, error) {
	var reply rawMessage
	err := conn.Invoke(ctx, method, rawMessage(nil), &reply, append(opts, grpc.ForceCodec(rawCodec{}))...)
	return reply, err
}

// The CRI's condition types (RuntimeReady, NetworkReady constants of the
// CRI API).
const (
	criRuntimeReady = "RuntimeReady"
	criNetworkReady = "NetworkReady"
)

// criCondition is runtime.v1.RuntimeCondition.
type criCondition struct {
	Type    string // 1
	Status  bool   // 2
	Reason  string // 3
	Message string // 4
}

// criVersion is the part of runtime.v1.VersionResponse the probe reports.
type criVersion struct {
	RuntimeName       string // 2
	RuntimeVersion    string // 3
	RuntimeAPIVersion string // 4: the CRI version the runtime implements, "v1" today
}

// healthServing is grpc.health.v1.HealthCheckResponse.ServingStatus SERVING.
const healthServing = 1

// fields calls visit for each field of a message, with its number, its
// wire type and its value's bytes (for varints, the value is in v).
func fields(b []byte, visit func(num protowire.Number, typ protowire.Type, data []byte, v uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("field tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var (
			data []byte
			v    uint64
		)
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := visit(num, typ, data, v); err != nil {
			return err
		}
	}
	return nil
}

// errWireType is a known field with an unexpected wire type.
var errWireType = errors.New("unexpected wire type")

func want(typ, expected protowire.Type, num protowire.Number) error {
	if typ != expected {
		return fmt.Errorf("field %d: %w %d", num, errWireType, typ)
	}
	return nil
}

// decodeCRIStatus reads the conditions of a runtime.v1.StatusResponse
// (status = 1: RuntimeStatus, whose conditions = 1).
func decodeCRIStatus(b []byte) ([]criCondition, error) {
	var conds []criCondition
	err := fields(b, func(num protowire.Number, typ protowire.Type, status []byte, _ uint64) error {
		if num != 1 {
			return nil // info (verbose) and fields of later CRI versions
		}
		if err := want(typ, protowire.BytesType, num); err != nil {
			return err
		}
		return fields(status, func(num protowire.Number, typ protowire.Type, cond []byte, _ uint64) error {
			if num != 1 {
				return nil
			}
			if err := want(typ, protowire.BytesType, num); err != nil {
				return err
			}
			c, err := decodeCRICondition(cond)
			conds = append(conds, c)
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("decode CRI StatusResponse: %w", err)
	}
	return conds, nil
}

func decodeCRICondition(b []byte) (criCondition, error) {
	var c criCondition
	err := fields(b, func(num protowire.Number, typ protowire.Type, data []byte, v uint64) error {
		var text *string
		switch num {
		case 1:
			text = &c.Type
		case 3:
			text = &c.Reason
		case 4:
			text = &c.Message
		case 2:
			if err := want(typ, protowire.VarintType, num); err != nil {
				return err
			}
			c.Status = v != 0
			return nil
		default:
			return nil
		}
		if err := want(typ, protowire.BytesType, num); err != nil {
			return err
		}
		*text = string(data)
		return nil
	})
	return c, err
}

// decodeCRIVersion reads a runtime.v1.VersionResponse (runtime.v1alpha2's
// has the same fields).
func decodeCRIVersion(b []byte) (criVersion, error) {
	var v criVersion
	err := fields(b, func(num protowire.Number, typ protowire.Type, data []byte, _ uint64) error {
		field := map[protowire.Number]*string{2: &v.RuntimeName, 3: &v.RuntimeVersion, 4: &v.RuntimeAPIVersion}[num]
		if field == nil {
			return nil
		}
		if err := want(typ, protowire.BytesType, num); err != nil {
			return err
		}
		*field = string(data)
		return nil
	})
	if err != nil {
		return v, fmt.Errorf("decode CRI VersionResponse: %w", err)
	}
	return v, nil
}

// decodeHealth reads a grpc.health.v1.HealthCheckResponse's status.
func decodeHealth(b []byte) (uint64, error) {
	var status uint64
	err := fields(b, func(num protowire.Number, typ protowire.Type, _ []byte, v uint64) error {
		if num != 1 {
			return nil
		}
		if err := want(typ, protowire.VarintType, num); err != nil {
			return err
		}
		status = v
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("decode HealthCheckResponse: %w", err)
	}
	return status, nil
}

// healthStatusName names a ServingStatus as grpc.health.v1 does.
func healthStatusName(s uint64) string {
	switch s {
	case 0:
		return "UNKNOWN"
	case healthServing:
		return "SERVING"
	case 2:
		return "NOT_SERVING"
	case 3:
		return "SERVICE_UNKNOWN"
	}
	return fmt.Sprintf("status %d", s)
}
