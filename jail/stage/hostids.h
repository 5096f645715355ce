// The host ids of a root-run jail, reserved from a range (hostids.c).
#ifndef RLJAIL_HOSTIDS_H
#define RLJAIL_HOSTIDS_H

// The default range: 65536 ids from 0x7f000000 (2130706432). Far above
// real users, above the ranges that sssd (200000-2000200000) and
// systemd-nspawn (524288-1879048191) hand out, below systemd's foreign
// range (from 2147352576) and 2^31, where some tools take ids for
// negative. jail.idRange and the integration tests name it too.
#define RLJAIL_ID_BASE 2130706432u
#define RLJAIL_ID_COUNT 65536u
// The overflow id, nobody and nogroup: what a finished run's files are
// given (jail.hostIDs.reclaim); never in the range.
#define RLJAIL_OVERFLOW_ID 65534u
#define RLJAIL_ID_DIR "/run/rljail"
#define RLJAIL_ID_LOCKS "/run/rljail/uid"

struct rljail_ids {
	unsigned uid, gid; // the jail's host ids
	int lock;          // the locked lock file of uid
	int marked;        // 1: an id below uid was passed over as marked (hostids.c)
};

// rljail_reserve_ids takes the lowest free id of the range and fills ids:
// NULL, or what failed, with errno set (0 when the failure is the range's).
const char *rljail_reserve_ids(struct rljail_ids *ids);

#endif
