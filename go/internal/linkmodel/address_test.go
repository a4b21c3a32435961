package linkmodel

import (
	"strings"
	"testing"
	"time"
)

// ipv4Frame is an Ethernet frame carrying an IPv4 header from src to dst.
func ipv4Frame(src, dst [4]byte) []byte {
	f := make([]byte, EthernetHeader+20+8)
	f[12], f[13] = 0x08, 0x00
	f[EthernetHeader] = 0x45
	copy(f[EthernetHeader+12:], src[:])
	copy(f[EthernetHeader+16:], dst[:])
	return f
}

func TestAddressDelaysMatchTheServerSide(t *testing.T) {
	us := map[string]int64{"10.10.1.100": 20000, "10.10.1.101": 0}
	down, err := NewAddressDelays(us, true)
	if err != nil {
		t.Fatal(err)
	}
	up, err := NewAddressDelays(us, false)
	if err != nil {
		t.Fatal(err)
	}
	origin, client, server := [4]byte{10, 10, 1, 100}, [4]byte{10, 10, 1, 2}, [4]byte{10, 10, 1, 1}
	if c, d := down.Classify(ipv4Frame(origin, client)); c == 0 || d != 20*time.Millisecond || down.Name(c) != "10.10.1.100" {
		t.Fatalf("down from the origin: class %d delay %v", c, d)
	}
	if c, d := up.Classify(ipv4Frame(client, origin)); c == 0 || d != 20*time.Millisecond {
		t.Fatalf("up to the origin: class %d delay %v", c, d)
	}
	// the other side's address is not matched: down by source, up by destination
	if c, _ := down.Classify(ipv4Frame(client, origin)); c != 0 {
		t.Fatalf("down matched a destination: class %d", c)
	}
	if c, _ := up.Classify(ipv4Frame(origin, client)); c != 0 {
		t.Fatalf("up matched a source: class %d", c)
	}
	// an address with 0 extra is still its own class (counted), with no delay
	if c, d := down.Classify(ipv4Frame([4]byte{10, 10, 1, 101}, client)); c == 0 || d != 0 {
		t.Fatalf("0 us origin: class %d delay %v", c, d)
	}
	if c, d := down.Classify(ipv4Frame(server, client)); c != 0 || d != 0 {
		t.Fatalf("the server's own address: class %d delay %v", c, d)
	}
	arp := ipv4Frame(origin, client)
	arp[12], arp[13] = 0x08, 0x06
	if c, _ := down.Classify(arp); c != 0 {
		t.Fatalf("an ARP frame was classified: %d", c)
	}
	if c, _ := down.Classify(arp[:20]); c != 0 {
		t.Fatal("a short frame was classified")
	}
	if down.Classes() != 3 || !strings.Contains(down.String(), "10.10.1.100+20ms") {
		t.Fatalf("classes %d, %q", down.Classes(), down.String())
	}
}

func TestAddressDelaysEmptyDelaysNothing(t *testing.T) {
	a, err := NewAddressDelays(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if c, d := a.Classify(ipv4Frame([4]byte{10, 10, 1, 100}, [4]byte{10, 10, 1, 2})); c != 0 || d != 0 || a.String() != "" {
		t.Fatalf("class %d delay %v %q", c, d, a.String())
	}
}

func TestAddressDelaysRefuseBadValuesByName(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]int64
		want string
	}{
		{map[string]int64{"10.10.1.300": 1}, `"10.10.1.300" is not an IPv4 address`},
		{map[string]int64{"fd00::1": 1}, `"fd00::1" is not an IPv4 address`},
		{map[string]int64{"10.10.1": 1}, `"10.10.1" is not an IPv4 address`},
		{map[string]int64{"10.010.1.1": 1}, `"10.010.1.1" is not an IPv4 address`},
		{map[string]int64{"10.+1.1.1": 1}, `"10.+1.1.1" is not an IPv4 address`},
		{map[string]int64{"10.10.1.100": -5}, "address_delay_us.10.10.1.100: must be >= 0 (got -5)"},
	} {
		_, err := NewAddressDelays(tc.in, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseConfigNamesABadAddressDelay(t *testing.T) {
	cfg := `{"format":1,"server_if":"a","client_if":"b","seed":1,"directions":{
	"down":{"rate_bps":0,"delay_us":1000,"jitter_kind":"none","loss":0,"address_delay_us":{"x":1}},
	"up":{"rate_bps":0,"delay_us":1000,"jitter_kind":"none","loss":0}}}`
	_, err := ParseConfig([]byte(cfg), nil)
	if err == nil || !strings.Contains(err.Error(), `directions.down.address_delay_us: "x" is not an IPv4 address`) {
		t.Fatalf("got %v", err)
	}
}
