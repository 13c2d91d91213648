package reconf

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// numbersConfig has one field of every numeric kind.
type numbersConfig struct {
	I   int           `yaml:"i"`
	I8  int8          `yaml:"i8"`
	I16 int16         `yaml:"i16"`
	I32 int32         `yaml:"i32"`
	I64 int64         `yaml:"i64"`
	U   uint          `yaml:"u"`
	U8  uint8         `yaml:"u8"`
	U16 uint16        `yaml:"u16"`
	U32 uint32        `yaml:"u32"`
	U64 uint64        `yaml:"u64"`
	F32 float32       `yaml:"f32"`
	F64 float64       `yaml:"f64"`
	D   time.Duration `yaml:"d"`
}

// TestNumbersExact is defect 2: every verdict of every numeric kind, from
// YAML. A nil want is field_type_mismatch. On the old decoder 0.9, -0.5 and
// 3.99 became 0, 0 and 3.
func TestNumbersExact(t *testing.T) {
	mismatch := any(nil)
	tests := []struct {
		field string
		text  string
		want  any
	}{
		// Signed integers: decimal, 0x, 0o; nothing else.
		{"i", "42", 42}, {"i", "-42", -42}, {"i", "+7", 7}, {"i", "0", 0}, {"i", "-0", 0},
		{"i", "0x1F", 31}, {"i", "0o17", 15},
		{"i", "0.9", mismatch}, {"i", "-0.5", mismatch}, {"i", "3.99", mismatch}, {"i", "3.0", mismatch},
		{"i", "1e3", mismatch}, {"i", "010", mismatch}, {"i", "0b101", mismatch}, {"i", "1_000", mismatch},
		{"i", `"5"`, mismatch}, {"i", "true", mismatch}, {"i", ".inf", mismatch}, {"i", "-0x10", mismatch},
		{"i", "null", mismatch}, {"i", "five", mismatch},
		{"i64", "9223372036854775807", int64(math.MaxInt64)}, {"i64", "-9223372036854775808", int64(math.MinInt64)},
		{"i64", "9223372036854775808", mismatch}, {"i64", "-9223372036854775809", mismatch},
		{"i8", "127", int8(127)}, {"i8", "-128", int8(-128)}, {"i8", "128", mismatch}, {"i8", "-129", mismatch},
		{"i16", "32767", int16(32767)}, {"i16", "32768", mismatch},
		{"i32", "-2147483648", int32(math.MinInt32)}, {"i32", "2147483648", mismatch},
		// Unsigned integers: no minus sign at all.
		{"u", "7", uint(7)}, {"u", "+7", uint(7)}, {"u", "-1", mismatch}, {"u", "-0", mismatch}, {"u", "3.5", mismatch},
		{"u8", "255", uint8(255)}, {"u8", "0xff", uint8(255)}, {"u8", "256", mismatch}, {"u8", "0x100", mismatch},
		{"u16", "65535", uint16(65535)}, {"u16", "65536", mismatch},
		{"u32", "4294967295", uint32(math.MaxUint32)}, {"u32", "4294967296", mismatch},
		{"u64", "18446744073709551615", uint64(math.MaxUint64)}, {"u64", "18446744073709551616", mismatch}, {"u64", "1e3", mismatch},
		// Floats: YAML's forms, within range; NaN refused.
		{"f64", "0.5", 0.5}, {"f64", "-0.5", -0.5}, {"f64", "3", 3.0}, {"f64", "3.0", 3.0}, {"f64", "1e3", 1000.0},
		{"f64", "-1.5E-3", -0.0015}, {"f64", ".5", 0.5}, {"f64", ".inf", math.Inf(1)}, {"f64", "-.inf", math.Inf(-1)},
		{"f64", ".nan", mismatch}, {"f64", "1e400", mismatch}, {"f64", "0x10", mismatch}, {"f64", "010", mismatch},
		{"f64", `"1.5"`, mismatch}, {"f64", "true", mismatch}, {"f64", "1_0.5", mismatch},
		{"f32", "0.25", float32(0.25)}, {"f32", "3.4e38", float32(3.4e38)}, {"f32", "3.5e38", mismatch},
		// Durations: Go's syntax, whole nanoseconds, in range.
		{"d", "30s", 30 * time.Second}, {"d", "1.5s", 1500 * time.Millisecond}, {"d", "1h30m", 90 * time.Minute},
		{"d", "-2ms", -2 * time.Millisecond}, {"d", "0", time.Duration(0)}, {"d", `"10us"`, 10 * time.Microsecond},
		{"d", "2562047h", 2562047 * time.Hour},
		{"d", "5", mismatch}, {"d", "1.5ns", mismatch}, {"d", "0.5ns", mismatch}, {"d", "1.0000000001s", mismatch},
		{"d", "2562048h", mismatch}, {"d", "1e3s", mismatch}, {"d", "true", mismatch}, {"d", "null", mismatch}, {"d", "s", mismatch},
	}
	fields := map[string]int{}
	nt := reflect.TypeFor[numbersConfig]()
	for i := range nt.NumField() {
		fields[nt.Field(i).Tag.Get("yaml")] = i
	}
	for _, tt := range tests {
		t.Run(tt.field+"="+tt.text, func(t *testing.T) {
			c := compiler[numbersConfig]{lookupEnv: noEnv}
			cand, err := c.compile(context.Background(), []byte(tt.field+": "+tt.text+"\n"))
			if tt.want == nil {
				var e *Error
				if !errors.As(err, &e) || e.Reason != ReasonFieldType {
					got := "accepted"
					if cand != nil {
						got = fmt.Sprint(reflect.ValueOf(cand.cfg).Elem().Field(fields[tt.field]))
					}
					t.Fatalf("got %s (err %v), want %s", got, err, ReasonFieldType)
				}
				if p := e.Problems[0]; p.Path != tt.field || p.Line != 1 || p.Column != len(tt.field)+3 {
					t.Errorf("problem = %+v, want %s at 1:%d", p, tt.field, len(tt.field)+3)
				}
				if strings.Trim(tt.text, `"`) != "" && len(tt.text) > 4 && strings.Contains(e.Error(), tt.text) {
					t.Errorf("error quotes the value: %v", e)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			got := reflect.ValueOf(cand.cfg).Elem().Field(fields[tt.field])
			want := reflect.ValueOf(tt.want)
			if want.Type() != got.Type() {
				want = want.Convert(got.Type())
			}
			if !got.Equal(want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// TestEnvNumbersExact: an environment variable goes through the same rules.
func TestEnvNumbersExact(t *testing.T) {
	for _, tt := range []struct {
		val string
		ok  bool
	}{{"5", true}, {"0x5", true}, {"0.9", false}, {"1e3", false}, {"010", false}, {"-1", true}} {
		c := compiler[testConfig]{lookupEnv: func(k string) (string, bool) {
			if k == "TEST_MAX_ATTEMPTS" {
				return tt.val, true
			}
			return "", false
		}}
		_, err := c.compile(context.Background(), []byte(baseYAML(1)))
		var e *Error
		switch {
		case tt.ok && errors.As(err, &e) && e.Reason == ReasonFieldType:
			t.Errorf("%s: refused: %v", tt.val, err)
		case !tt.ok && (!errors.As(err, &e) || e.Reason != ReasonFieldType):
			t.Errorf("%s: err = %v, want %s", tt.val, err, ReasonFieldType)
		}
	}
}
