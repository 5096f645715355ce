package jail

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/rljail/rljail/seccomp"
)

// plainResult has Result's fields and tags but not its MarshalJSON, so
// that json.Marshal encodes it by reflection: the reference.
type plainResult Result

// fill sets every field reachable from v to a value that is not its zero:
// strings to s, numbers to n (the float fields to f), bools to true,
// slices to two elements, pointers to a new value and maps to three keys
// out of order. A field added anywhere in the report is so always
// present in what the test compares.
func fill(v reflect.Value, s string, n int64, f float64) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n) * 3)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(f)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), s, n+int64(i), f)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), s, n, f)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0), s, n, f)
		fill(v.Index(1), s+"1", n+1, f)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for _, k := range []string{"arg3", "arg0", "arg5"} {
			e := reflect.New(v.Type().Elem()).Elem()
			fill(e, s, n, f)
			v.SetMapIndex(reflect.ValueOf(k), e)
		}
	default:
		panic("fill: a report field of kind " + v.Kind().String() + " needs a case here and in resultjson.go")
	}
}

func TestResultJSONIsEncodingJSONs(t *testing.T) {
	strs := []string{"", "ok", "plain text", `"quoted" \ back`, "<a href=x>&amp;</a>",
		"\x00\x01\x1f\x7f", "\b\f\n\r\t", "é ü 日本", "\u2028 and \u2029", "\xff\xfe bad",
		"cut \xc3", "\xed\xa0\x80 surrogate", "emoji \U0001F600", "tab\tend\\"}
	floats := []float64{0, 1, 1.5, -2, 536870912, 1e20, 1e21, 1e-6, 1e-7, 1.25e-9,
		123456789.125, 5e-324, math.MaxFloat64, 0.1}
	var cases []Result
	cases = append(cases, Result{}, Result{Status: StatusOK, Seccomp: &seccomp.Report{}})
	for i, s := range strs {
		var r Result
		fill(reflect.ValueOf(&r).Elem(), s, int64(i*1000-3), floats[i%len(floats)])
		cases = append(cases, r)
	}
	for i, f := range floats {
		var r Result
		fill(reflect.ValueOf(&r).Elem(), "x", -int64(i), f)
		cases = append(cases, r)
	}
	for i, r := range cases {
		want, err := json.Marshal(plainResult(r))
		if err != nil {
			t.Fatalf("case %d: encoding/json: %v", i, err)
		}
		got, err := r.AppendJSON(nil)
		if err != nil {
			t.Fatalf("case %d: AppendJSON: %v", i, err)
		}
		if string(got) != string(want) {
			t.Errorf("case %d: AppendJSON differs from encoding/json\n got %s\nwant %s", i, got, want)
		}
		// json.Marshal of a record that holds a Result goes through
		// MarshalJSON, and must give the same.
		nested, err := json.Marshal(struct{ R Result }{r})
		if err != nil || string(nested) != `{"R":`+string(want)+`}` {
			t.Errorf("case %d: nested Marshal = %s, %v", i, nested, err)
		}
	}
}

func TestResultJSONRefusesNaN(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		r := Result{Limits: Limits{CPUs: Limit{Value: f}}}
		if _, err := r.AppendJSON(nil); err == nil {
			t.Errorf("AppendJSON with a limit of %v: no error", f)
		}
	}
}

func BenchmarkResultJSON(b *testing.B) {
	var r Result
	fill(reflect.ValueOf(&r).Elem(), "some text", 12345, 1.5)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := r.AppendJSON(nil); err != nil {
			b.Fatal(err)
		}
	}
}
