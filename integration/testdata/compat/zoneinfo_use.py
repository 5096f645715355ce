"""zoneinfo: named time zones and their offsets (the rootfs has the time zone database)."""
import datetime
import zoneinfo

for name in ("Europe/Stockholm", "America/New_York", "Asia/Tokyo", "UTC"):
    tz = zoneinfo.ZoneInfo(name)
    summer = datetime.datetime(2026, 7, 1, 12, tzinfo=tz)
    winter = datetime.datetime(2026, 1, 1, 12, tzinfo=tz)
    print(name, summer.utcoffset(), winter.utcoffset(), summer.tzname())
print("many zones:", len(zoneinfo.available_timezones()) > 300)
