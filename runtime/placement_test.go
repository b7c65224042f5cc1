package runtime

import (
	"strings"
	"testing"

	"github.com/inferq/inferq/models"
)

func TestPlace(t *testing.T) {
	two := []GPU{{Index: 0, MemoryFree: 1 << 30}, {Index: 1, MemoryFree: 8 << 30}}
	model := func(name string, d models.Device, inst int) models.Model {
		m := models.NewModel(name)
		m.Device, m.Instances = d, inst
		return m
	}
	tests := []struct {
		name    string
		m       models.Model
		gpus    []GPU
		want    string // devices joined
		note    bool
		wantErr string
	}{
		{"cpu", model("a", models.Device{Kind: models.DeviceCPU}, 2), two, "cpu,cpu", false, ""},
		{"auto no gpu", model("a", models.Device{Kind: models.DeviceAuto}, 1), nil, "cpu", true, ""},
		{"auto two gpus, most free first", model("a", models.Device{Kind: models.DeviceAuto}, 1), two, "cuda:1,cuda:0", false, ""},
		{"auto instances per gpu", model("a", models.Device{Kind: models.DeviceAuto}, 2), two, "cuda:1,cuda:1,cuda:0,cuda:0", false, ""},
		{"cuda no gpu", model("m1", models.Device{Kind: models.DeviceCUDA}, 1), nil, "", false, `model "m1" asks for device cuda, but there is no usable GPU: no driver`},
		{"list", model("a", models.Device{Kind: models.DeviceList, GPUs: []int{0}}, 1), two, "cuda:0", false, ""},
		{"list not visible", model("m2", models.Device{Kind: models.DeviceList, GPUs: []int{3}}, 1), two, "", false, `model "m2" asks for GPU 3, which is not visible (visible: [0 1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := Place([]models.Model{tt.m}, tt.gpus, "no driver")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range ps[0].Devices {
				got = append(got, d.String())
			}
			if strings.Join(got, ",") != tt.want || (ps[0].Note != "") != tt.note {
				t.Errorf("devices %v note %q, want %s note=%v", got, ps[0].Note, tt.want, tt.note)
			}
		})
	}
}
