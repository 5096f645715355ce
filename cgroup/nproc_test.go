package cgroup

import "testing"

func TestKernelVersion(t *testing.T) {
	for in, want := range map[string][3]int{
		"6.1.0-18-amd64": {6, 1, 1}, "5.14": {5, 14, 1}, "5.13.19": {5, 13, 1}, "4.19.0": {4, 19, 1}, "garbage": {0, 0, 0}, "6.x": {6, 0, 0},
	} {
		major, minor, ok := kernelVersion(in)
		if major != want[0] || minor != want[1] || ok != (want[2] == 1) {
			t.Errorf("kernelVersion(%q) = %d, %d, %v", in, major, minor, ok)
		}
	}
}
