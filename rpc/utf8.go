package rpc

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cohortlabs/cohort/errcode"
)

// The API protos (proto/cohort/v1) do not check strings for UTF-8 while
// decoding (features.utf8_validation = NONE): grpc-go reports a decode
// error as Internal, which tells the caller nothing. These interceptors
// check every string of every request instead, before it is forwarded or
// served, and refuse one that is not UTF-8 with INVALID_ARGUMENT naming
// the field. Nothing that is not UTF-8 reaches the engine or the log.

// UTF8UnaryInterceptor refuses a request with a string that is not UTF-8.
func UTF8UnaryInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := checkUTF8(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// UTF8StreamInterceptor refuses a streamed request message with a string
// that is not UTF-8; the call ends with that refusal whatever the handler
// (or the forwarder relaying it) answers after it.
func UTF8StreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s := &utf8Stream{ServerStream: ss}
	err := handler(srv, s)
	if bad := s.refusal(); bad != nil {
		return bad
	}
	return err
}

type utf8Stream struct {
	grpc.ServerStream
	mu  sync.Mutex
	bad error
}

func (s *utf8Stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := checkUTF8(m); err != nil {
		s.mu.Lock()
		s.bad = err
		s.mu.Unlock()
		return err
	}
	return nil
}

func (s *utf8Stream) refusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bad
}

// checkUTF8 returns INVALID_ARGUMENT naming the first string field of m
// (in field-number order, depth first) that is not valid UTF-8.
func checkUTF8(m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	r := pm.ProtoReflect()
	if path := invalidUTF8(r, string(r.Descriptor().Name())); path != "" {
		return toStatus(errcode.Errorf(errcode.InvalidArgument, "field %s is not valid UTF-8", path))
	}
	return nil
}

// invalidUTF8 returns the path of the first string in m that is not
// UTF-8 (e.g. "OffsetCommitRequest.offsets[2].metadata"), or "".
func invalidUTF8(m protoreflect.Message, path string) string {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		at := path + "." + string(fd.Name())
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			for j := range l.Len() {
				if bad := invalidValue(fd, l.Get(j), at+"["+strconv.Itoa(j)+"]"); bad != "" {
					return bad
				}
			}
		case fd.IsMap():
			var bad string
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
					bad = at + " (a key)"
					return false
				}
				bad = invalidValue(fd.MapValue(), mv, fmt.Sprintf("%s[%v]", at, k.Interface()))
				return bad == ""
			})
			if bad != "" {
				return bad
			}
		default:
			if bad := invalidValue(fd, v, at); bad != "" {
				return bad
			}
		}
	}
	return ""
}

func invalidValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return path
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return invalidUTF8(v.Message(), path)
	}
	return ""
}
