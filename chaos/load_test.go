package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/inferq/inferq/mq"
	"github.com/inferq/inferq/task"
)

// jsonStr is s as a JSON string; s must be valid UTF-8.
func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// taskBody is a task envelope for mlp with the given raw inputs list and
// raw reply_to value (a JSON value, or "" for none).
func taskBody(idJSON, inputsJSON, replyJSON string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"task_id":%s,"task_name":"mlp","args":[],"kwargs":{"inputs":%s`, idJSON, inputsJSON)
	if replyJSON != "" {
		fmt.Fprintf(&b, `,"reply_to":%s`, replyJSON)
	}
	fmt.Fprintf(&b, `},"created_at":%q}`, task.FormatTime(time.Now()))
	return b.Bytes()
}

// xInput is an OIP input list with one tensor x of shape and raw data.
func xInput(shape, data string) string {
	return fmt.Sprintf(`[{"name":"x","shape":%s,"datatype":"FP32","data":%s}]`, shape, data)
}

// row16 is 16 FP32 values in JSON, v first.
func row16(v string) string {
	return "[" + v + strings.Repeat(",0.5", 15) + "]"
}

// hostileKinds is the flood's menu (issue 11 item 10): random bytes,
// truncated JSON, wrong types, negative and overflowing shapes, 1e9
// declared elements, 10k-deep nesting, invalid UTF-8, binary-form headers
// that lie, hostile and huge ids and reply_to values, unknown models,
// values that do not fit FP32, and odd JSON.
var hostileKinds = []struct {
	name string
	make func(g *hostileGen, n int) hostile
}{
	{"random", randomBytes}, {"truncated", truncatedJSON}, {"types", wrongTypes}, {"negshape", negativeShape},
	{"bigshape", overflowShape}, {"declared", hugeDeclared}, {"deep", deepNesting}, {"utf8", invalidUTF8},
	{"binlie", lyingBinary}, {"id", hostileID}, {"replyto", hostileReplyTo}, {"model", unknownModel},
	{"nonfinite", nonFinite}, {"odd", oddJSON},
}

// hostile is one hostile message before it gets its key tag.
type hostile struct {
	body   []byte
	tags   map[string]string
	taskID string // the id a record would carry; "" when none
	alt    string // another id it may carry (a duplicated key)
	want   want
}

// hostileGen makes hostile messages for one scenario.
type hostileGen struct {
	r     *rig
	rnd   *rand.Rand
	reply string
	valid []byte // a valid JSON task body, to truncate
}

func newHostileGen(r *rig) *hostileGen {
	g := &hostileGen{r: r, rnd: rand.New(rand.NewPCG(7, 11)), reply: jsonStr(r.reply)}
	m, _ := r.validTask("template", false, g.rnd)
	g.valid = m.Body
	return g
}

// next returns the i-th hostile message of the flood and its entry.
func (g *hostileGen) next(i int) (mq.OutMessage, *entry) {
	kind := hostileKinds[i%len(hostileKinds)]
	n := i / len(hostileKinds)
	key := fmt.Sprintf("h-%s-%d-%s", g.r.name, i, kind.name)
	h := kind.make(g, n)
	if h.tags == nil {
		h.tags = map[string]string{}
	}
	h.tags[tagKey] = key
	return mq.OutMessage{Channel: g.r.queue, Body: h.body, Tags: h.tags}, &entry{key: key, taskID: h.taskID, alt: h.alt, want: h.want}
}

// id returns a fresh well-formed task id.
func (g *hostileGen) id() string { return g.r.nextID("hid") }

func randomBytes(g *hostileGen, n int) hostile {
	b := make([]byte, 1+g.rnd.IntN(2048)) // the broker refuses an empty body
	for i := range b {
		b[i] = byte(g.rnd.UintN(256))
	}
	return hostile{body: b, want: wantAny}
}

func truncatedJSON(g *hostileGen, n int) hostile {
	cut := 1 + g.rnd.IntN(len(g.valid)-2)
	return hostile{body: bytes.Clone(g.valid[:cut]), want: wantAny}
}

func wrongTypes(g *hostileGen, n int) hostile {
	id := g.id()
	in := xInput("[1,16]", row16("0.5"))
	bodies := []string{
		fmt.Sprintf(`{"task_id":12345,"task_name":"mlp","args":[],"kwargs":{"inputs":%s,"reply_to":%s}}`, in, g.reply),
		fmt.Sprintf(`{"task_id":%s,"task_name":["mlp"],"args":[],"kwargs":{"inputs":%s,"reply_to":%s}}`, jsonStr(id), in, g.reply),
		fmt.Sprintf(`{"task_id":%s,"task_name":"mlp","args":"x","kwargs":[1,2,3]}`, jsonStr(id)),
		string(taskBody(jsonStr(id), `{"name":"x"}`, g.reply)),
		string(taskBody(jsonStr(id), `[{"name":"x","shape":"1,16","datatype":"FP32","data":[1]}]`, g.reply)),
		string(taskBody(jsonStr(id), `[{"name":"x","shape":[1,16],"datatype":7,"data":[1]}]`, g.reply)),
		string(taskBody(jsonStr(id), `[{"name":"x","shape":[1,16],"datatype":"FP32","data":"sixteen floats"}]`, g.reply)),
		string(taskBody(jsonStr(id), `[{"name":"x","shape":[1,16],"datatype":"FP32","data":[true,null,{},[],"a",1,2,3,4,5,6,7,8,9,10,11]}]`, g.reply)),
		fmt.Sprintf(`{"task_id":%s,"task_name":"mlp","args":[],"kwargs":{"inputs":%s,"reply_to":%s,"priority":1e300,"timeout_ms":-5,"outputs":7},"created_at":"yesterday"}`, jsonStr(id), in, g.reply),
		string(taskBody(jsonStr(id), `[{"name":"x","shape":[1,16],"datatype":"NOPE","data":[1]}]`, g.reply)),
	}
	h := hostile{body: []byte(bodies[n%len(bodies)]), want: wantAny}
	if n%len(bodies) != 0 {
		h.taskID = id
	}
	return h
}

func negativeShape(g *hostileGen, n int) hostile {
	id := g.id()
	shapes := []string{"[-1,16]", "[1,-16]", "[-9223372036854775808,16]", "[0,16]", "[]", "[1,16,-1]"}
	return hostile{body: taskBody(jsonStr(id), xInput(shapes[n%len(shapes)], row16("0.5")), g.reply), taskID: id, want: wantAny}
}

func overflowShape(g *hostileGen, n int) hostile {
	id := g.id()
	shapes := []string{"[9223372036854775807,16]", "[4294967296,4294967296,4294967296]", "[18446744073709551616,16]",
		"[1e30,16]", "[3037000500,3037000500]", "[1.5,16]"}
	return hostile{body: taskBody(jsonStr(id), xInput(shapes[n%len(shapes)], row16("0.5")), g.reply), taskID: id, want: wantAny}
}

// hugeDeclared declares 1e9 elements (JSON) or a binary_data_size of 4 GB
// behind a small body.
func hugeDeclared(g *hostileGen, n int) hostile {
	id := g.id()
	if n%2 == 0 {
		return hostile{body: taskBody(jsonStr(id), xInput("[62500000,16]", "["+row16("0.5")+"]"), g.reply), taskID: id, want: wantAny}
	}
	header := taskBody(jsonStr(id), `[{"name":"x","shape":[62500000,16],"datatype":"FP32","parameters":{"binary_data_size":4000000000}}]`, g.reply)
	body := append(bytes.Clone(header), make([]byte, 64)...)
	return hostile{body: body, taskID: id, want: wantAny, tags: map[string]string{
		task.TagContentType: task.ContentTypeBinary, task.TagHeaderLength: strconv.Itoa(len(header))}}
}

// deepNesting nests 10,000 arrays or objects where a tensor or a kwarg is
// read.
func deepNesting(g *hostileGen, n int) hostile {
	id := g.id()
	const depth = 10000
	arr := strings.Repeat("[", depth) + "0.5" + strings.Repeat("]", depth)
	obj := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
	var body string
	switch n % 3 {
	case 0:
		body = fmt.Sprintf(`{"task_id":%s,"task_name":"mlp","args":[%s],"kwargs":{"reply_to":%s}}`, jsonStr(id), arr, g.reply)
	case 1:
		body = string(taskBody(jsonStr(id), xInput("[1,16]", arr), g.reply))
	default:
		body = fmt.Sprintf(`{"task_id":%s,"task_name":"mlp","args":[],"kwargs":{"inputs":%s,"reply_to":%s,"deep":%s}}`,
			jsonStr(id), xInput("[1,16]", row16("0.5")), g.reply, obj)
	}
	return hostile{body: []byte(body), taskID: id, want: wantAny}
}

// invalidUTF8 puts bytes that are not UTF-8 in the id, the model name,
// the input name and reply_to.
func invalidUTF8(g *hostileGen, n int) hostile {
	id := g.id()
	bad := "\xff\xfe\xc3\x28"
	in := xInput("[1,16]", row16("0.5"))
	switch n % 4 {
	case 0:
		return hostile{body: taskBody(`"`+id+bad+`"`, in, g.reply), taskID: id + bad, want: wantAny}
	case 1:
		return hostile{body: []byte(fmt.Sprintf(`{"task_id":%s,"task_name":"mlp%s","args":[],"kwargs":{"inputs":%s,"reply_to":%s}}`,
			jsonStr(id), bad, in, g.reply)), taskID: id, want: wantAny}
	case 2:
		return hostile{body: taskBody(jsonStr(id), `[{"name":"x`+bad+`","shape":[1,16],"datatype":"FP32","data":`+row16("0.5")+`}]`, g.reply),
			taskID: id, want: wantAny}
	default:
		return hostile{body: taskBody(jsonStr(id), in, `"`+g.r.reply+bad+`"`), taskID: id, want: wantAny}
	}
}

// lyingBinary sends binary-form bodies whose header length tag or
// binary_data_size lie.
func lyingBinary(g *hostileGen, n int) hostile {
	id := g.id()
	header := taskBody(jsonStr(id), `[{"name":"x","shape":[1,16],"datatype":"FP32","parameters":{"binary_data_size":64}}]`, g.reply)
	data := make([]byte, 64)
	hl := strconv.Itoa(len(header))
	body := append(bytes.Clone(header), data...)
	tags := map[string]string{task.TagContentType: task.ContentTypeBinary}
	switch n % 8 {
	case 0:
		hl = strconv.Itoa(len(body) + 100)
	case 1:
		hl = "-1"
	case 2:
		hl = "sixty"
	case 3:
		hl = "0"
	case 4:
		hl = "99999999999999999999999"
	case 5:
		body = body[:len(body)-10] // data shorter than declared
	case 6:
		body = append(body, make([]byte, 4096)...) // data longer than declared
	case 7:
		hl = strconv.Itoa(len(header) - 5) // cuts the header mid-JSON
	}
	tags[task.TagHeaderLength] = hl
	return hostile{body: body, tags: tags, taskID: id, want: wantAny}
}

// hostileIDs are the id forms of issue 11 items 2 and 4.
var hostileIDs = []string{"\nx", " x", "*", ">", "x.", "\t", "\x00", "\nC victim 50", "/../x", strings.Repeat("i", 300)}

// hostileID sends a valid task under a hostile id: newline, space, `*`,
// `>`, control bytes, 300 bytes, 100 KiB, and once per flood 4.5 MiB.
func hostileID(g *hostileGen, n int) hostile {
	var id string
	switch {
	case n%10000 == 3:
		id = fmt.Sprintf("h%d", n) + strings.Repeat("I", 4608<<10)
	case n%50 == 7:
		id = fmt.Sprintf("h%d", n) + strings.Repeat("i", 100<<10)
	case n%50 == 11:
		id = ""
	default:
		id = g.id() + hostileIDs[n%len(hostileIDs)]
	}
	return hostile{body: taskBody(jsonStr(id), xInput("[1,16]", row16("0.5")), g.reply), taskID: id, want: wantAny}
}

// hostileReplyTos are reply_to values that are not channel names (KUBEMQ.md
// trap 19).
var hostileReplyTos = []string{"a b", "x\ny", "*", ">", "x.", "", strings.Repeat("r", 300)}

func hostileReplyTo(g *hostileGen, n int) hostile {
	id := g.id()
	rt := hostileReplyTos[n%len(hostileReplyTos)]
	if rt == "" {
		rt = " " // never the empty reply_to: that is the compat path, a channel per task
	}
	return hostile{body: taskBody(jsonStr(id), xInput("[1,16]", row16("0.5")), jsonStr(rt)), taskID: id, want: wantAny}
}

func unknownModel(g *hostileGen, n int) hostile {
	id := g.id()
	names := []string{"nope", "", "mlp ", "MLP", strings.Repeat("m", 10000)}
	body := fmt.Sprintf(`{"task_id":%s,"task_name":%s,"args":[],"kwargs":{"inputs":%s,"reply_to":%s}}`,
		jsonStr(id), jsonStr(names[n%len(names)]), xInput("[1,16]", row16("0.5")), g.reply)
	return hostile{body: []byte(body), taskID: id, want: wantAny}
}

// nonFinite sends values FP32 cannot hold (refused, issue 11 item 8) and
// bare non-finite tokens (accepted).
func nonFinite(g *hostileGen, n int) hostile {
	id := g.id()
	vals := []string{"1e999", "-1e999", "1e39", "NaN", "Infinity", "-Infinity", "1e-999"}
	v := vals[n%len(vals)]
	h := hostile{body: taskBody(jsonStr(id), xInput("[1,16]", row16(v)), g.reply), taskID: id, want: wantAny}
	if n%len(vals) < 3 {
		h.want = wantRefused
	}
	return h
}

func oddJSON(g *hostileGen, n int) hostile {
	id, other := g.id(), g.id()
	in := xInput("[1,16]", row16("0.5"))
	bodies := []string{
		" ", "null", "[]", "{}", `"task"`, "\ufeff" + string(g.valid),
		string(g.valid) + "garbage",
		fmt.Sprintf(`{"task_id":%s,"task_id":%s,"task_name":"mlp","args":[],"kwargs":{"inputs":%s,"reply_to":%s}}`, jsonStr(id), jsonStr(other), in, g.reply),
		fmt.Sprintf(`{"task_id":%s,"task_name":"mlp","args":[],"kwargs":{"inputs":%s,"inputs":[],"reply_to":%s}}`, jsonStr(id), in, g.reply),
		fmt.Sprintf(`{"task_id":%s,"task_name":"mlp","kwargs":{"inputs":[%s,%s],"reply_to":%s}}`, jsonStr(id), in[1:len(in)-1], in[1:len(in)-1], g.reply),
	}
	i := n % len(bodies)
	h := hostile{body: []byte(bodies[i]), want: wantAny}
	if i >= 7 {
		h.taskID = id
	}
	if i == 7 {
		h.alt = other
	}
	return h
}
