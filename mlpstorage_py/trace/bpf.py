"""The bpftrace program one host runs: counters and log2 histograms kept in kernel maps (memory
bounded however long the run), printed once at the end, and the in-flight counters sampled every
SAMPLE_MS. trace/parse.py reads its `-f json` output back.

Every event is keyed by the UTS namespace of the task that issued it (`@uts` names each one), so
a host's share is the events its hostname issued: simulated hosts share one kernel and one disk,
and a kernel's writeback (kworkers) is issued under the root namespace's name, not the host's.

Block level (a data path with a disk behind it): a request's owner is the task that allocated it
(`block_getrq`, in the submitter's context); `block_rq_issue` often runs in a kblockd worker. A
request the trace never saw allocated (a flush the kernel builds itself, or one queued before the
start) belongs to the task that issued it. Latency is issue to completion.

VFS level (tmpfs, NFS, FUSE: no disk behind the path): the read/write/fsync system calls whose
file lies on the data path's filesystem (the fd's superblock device), entry to exit.

Nothing counts until the sampler's first tick (`@go`, READY_MARK): bpftrace prints "Attaching
N probes" before it attaches them one by one, in the program's order, the sampler last; a
request issued before its completion probe was attached would stay in flight for ever. At the
end the tracer drains before it stops: a getpgid() of the program's drain number (`@stop`, as
the work mark) stops counting new requests and system calls, the sampler's ticks say `drain`,
and the session waits until what was counted is done (no request in flight), so every counted
request's completion is in its latency histogram; what is still in flight when it stops is
counted apart (trace/parse.py), never dropped in silence.

A request's completion is paired with its issue by (dev, sector) and its op: a flush request the
block layer builds (`FF`) is issued at sector 0 but completes at sector -1 (an unset position),
and the empty preflush request it ran for completes at sector 0 without ever reaching the
device, so neither pairs with the other. The owner, comm and op a request was counted under
at its issue are kept with it (`@tow`, `@tcomm`, `@top`) so that its latency lands under the
same key as its count; a second issue on a key whose first is still in flight counts the
first's completion as unseen (`@lost`). The END prints the requests still in flight.

The run's work (launch/heartbeat.mark_work): a process that calls getpgid() of the run's own
mark is the run's from then on, and so is what it forks; an exec ends it (a launcher, a shell: a rank marks
itself once its imports are done). Its I/O from the mark on is a stream of its own, flagged in
the owner, so replay.fio keeps the workload apart from imports, launchers and other work.

Keys in the output: `ns,dev,op` for the device maps, `owner,dev,op,comm` for the streams (one
per process and device, the busy time too), `owner,dev,op,tid` for the threads that issued a
process's requests of one op (not the kernel's writeback on its behalf), `owner,op` for the files
it closed, and `owner,dev,op` for when a process's data requests of one op were first and last
issued (ms of the tracer's clock; a window per process, not per thread name; a filesystem's
metadata requests, REQ_META, are left out of it: a bitmap read while a checkpoint is written is
no read phase), where owner packs the namespace, the kernel-thread flag, the
work flag and the pid into one number (one map value, so a request's owner is never half written).
"""

from __future__ import annotations

from dataclasses import dataclass

SAMPLE_MS = 100
# owner = uts namespace inum << 32 | PF_KTHREAD (0x00200000) << 10 (bit 31) | work (bit 30) | pid (< 2**22)
KTHREAD_BIT = 1 << 31
WORK_BIT = 1 << 30
PID_MASK = (1 << 22) - 1
END_MARK = "end"  # the END prints "end <ms of the tracer's clock>"
DRAIN_MARK = "drain"  # a tick while draining prints "<ms> drain"
# op numbers in the maps: the index into results.io_trace.OPS (read, write, flush)
READ, WRITE, FLUSH = 0, 1, 2

# What the end prints, and the in-flight counters the sampler prints (issued, done).
RESULT_MAPS = ("@uts", "@rq", "@by", "@sz", "@lat", "@seq", "@srq", "@sby", "@ssz", "@sseq", "@sbusy", "@sfirst", "@slast", "@stid")
BLOCK_RESULT_MAPS = ("@sfsync", "@ssfr", "@lost", "@tow", "@top")  # only the block program defines them
FILE_RESULT_MAPS = ("@sfiles", "@sfbytes")  # only a program that counts files defines them
SAMPLED_MAPS = ("@uts", "@qi", "@qd")
READY_MARK = "ready"
_BLOCK_HELPERS = ("@own", "@own_comm", "@t0", "@tcomm", "@rqd", "@end", "@send", "@work", "@iown", "@icomm", "@wbino")
_VFS_HELPERS = ("@vt", "@vop", "@vdev", "@vpos", "@vino", "@end", "@vend_ino", "@send", "@sino", "@work")


@dataclass(frozen=True)
class Target:
    """One device the run's data reaches on a host: a disk (level block, `dev` the kernel's dev_t
    of the whole disk, as request tracepoints show it) or a filesystem (level vfs, `dev` its
    superblock's s_dev)."""

    name: str
    dev: int
    level: str


NS = "(uint64)curtask->nsproxy->uts_ns->ns.inum"
NAME_UTS = f"@uts[{NS}] = curtask->nsproxy->uts_ns->name.nodename;"
OWNER = f"(({NS} << 32) | (((uint64)curtask->flags & 0x00200000) << 10) | ((uint64)@work[pid] << 30) | (uint64)pid)"
WINDOW = "@sfirst[$own, $dev, $op] = min(elapsed / 1000000); @slast[$own, $dev, $op] = max(elapsed / 1000000);"
FOLLOW_WORK = """
tracepoint:sched:sched_process_fork /@work[pid]/ { @work[args->child_pid] = 1; }
tracepoint:sched:sched_process_exec /@work[pid]/ { delete(@work[pid]); }
tracepoint:sched:sched_process_exit /@work[tid]/ { delete(@work[tid]); }
"""
RQ = "(uint64)args->dev, args->sector"


# Writeback on the work's behalf: the kernel writes a file's dirty pages back from its own
# threads, whose requests would otherwise be the kernel's. An inode first dirtied by a process
# of the work (its enqueue on the dirty list runs in the writer's context) names that process;
# while a writeback thread writes that inode back, its requests are the writer's. An inode is
# forgotten once its writeback wrote less than it was allowed (nothing dirty was left), or when
# its writer fsyncs it (that writeback runs in the writer's own context). A work process's
# fsync calls are counted too (`@sfsync[owner]`): the block layer merges concurrent flushes, so
# its flush requests undercount them; so are its sync_file_range calls that start writeback
# (SYNC_FILE_RANGE_WRITE, `@ssfr[owner]`), a writer's own way to keep the device busy. The map holds what
# the kernel's map size allows (4,096 inodes dirty at once by default); beyond that the
# writeback is the kernel threads' again.
WHO = ("$own = " + OWNER + "; $who = comm; "
       "if (@wbino[tid]) { $own = @iown[@wbino[tid]]; $who = @icomm[@wbino[tid]]; }")
WRITEBACK = f"""
tracepoint:writeback:writeback_dirty_inode_enqueue /@work[pid]/ {{
  @iown[(uint64)args->ino] = {OWNER}; @icomm[(uint64)args->ino] = comm; {NAME_UTS}
}}
tracepoint:writeback:writeback_single_inode_start /@iown[(uint64)args->ino]/ {{ @wbino[tid] = (uint64)args->ino; }}
tracepoint:writeback:writeback_single_inode /@wbino[tid]/ {{
  delete(@wbino[tid]);
  if (args->wrote < (uint64)args->nr_to_write) {{ delete(@iown[(uint64)args->ino]); delete(@icomm[(uint64)args->ino]); }}
}}
tracepoint:syscalls:sys_enter_sync_file_range /@work[pid] && (args->flags & 2)/ {{ @ssfr[{OWNER}] = count(); }}
tracepoint:syscalls:sys_enter_fsync, tracepoint:syscalls:sys_enter_fdatasync /@work[pid]/ {{
  @sfsync[{OWNER}] = count();
  $t = curtask;
  if ((uint64)args->fd < (uint64)$t->files->fdt->max_fds) {{
    $i = (uint64)(*($t->files->fdt->fd + args->fd))->f_inode->i_ino;
    delete(@iown[$i]); delete(@icomm[$i]);
  }}
}}
"""


# The files the work reads and writes, so replay.fio has the run's file sizes: when a work
# process closes a regular file on a data path's filesystem (`files`: their superblocks' s_dev),
# the file counts once for the process, as written when it was open for writing, else as read,
# with its size then (`@sfiles`, `@sfbytes[owner, op]`). A file read twice counts twice (as a
# replay reading a file of that size twice); one still open when the trace ends is not counted.
def _files(devs: list[int]) -> str:
    only = " || ".join(f"$dev == {d}" for d in devs)
    return f"""
tracepoint:syscalls:sys_enter_close /@go && @work[pid]/ {{
  $t = curtask;
  if ((uint64)args->fd < (uint64)$t->files->fdt->max_fds) {{
    $f = *($t->files->fdt->fd + args->fd);
    if ($f != 0) {{
      $dev = (uint64)$f->f_inode->i_sb->s_dev;
      if ((($f->f_inode->i_mode & 0xf000) == 0x8000) && ({only})) {{
        $op = {READ};
        if (($f->f_mode & 2) != 0) {{ $op = {WRITE}; }}
        @sfiles[{OWNER}, $op] = count(); @sfbytes[{OWNER}, $op] = sum((uint64)$f->f_inode->i_size);
      }}
    }}
  }}
}}
"""


METADATA_MAX = 256 << 10  # a larger request is data (inode-table readahead is 128 KiB): its rwbs is not looked at


def _metadata(rwbs: str) -> str:
    """A bpftrace condition: the request carries REQ_META (an `M` in its rwbs, after the op and
    its F/A/S flags: a filesystem's bitmaps, inode tables, directories). The kernel writes `M`
    for nothing else, so a byte compare at each place it can stand (1-5: after a leading F, the
    op and three flags) finds it; the 32 prefix strncmp() this replaced took a third of
    bpftrace's start-up CPU (1.3-1.7 of 4.8-6.1 s here) to compile."""
    return "(" + " || ".join(f"((uint8 *){rwbs})[{i}] == 77" for i in range(1, 6)) + ")"


def _op(rwbs: str) -> str:
    """bpftrace statements setting $op from a tracepoint's rwbs ('R', 'RA', 'WS', 'FWS', 'FF'...:
    a leading F is a preflush); 3 for what is none of the three (discard, zeroes)."""
    return (f'$op = 3;\n'
            f'  if (strncmp({rwbs}, "R", 1) == 0 || strncmp({rwbs}, "FR", 2) == 0) {{ $op = {READ}; }}\n'
            f'  else if (strncmp({rwbs}, "W", 1) == 0 || strncmp({rwbs}, "FW", 2) == 0) {{ $op = {WRITE}; }}\n'
            f'  else if (strncmp({rwbs}, "F", 1) == 0) {{ $op = {FLUSH}; }}')


def _block(devs: list[int]) -> str:
    """Requests on the disks `devs`. Sequentiality is judged in the submitter's order, as each
    bio is queued (a request's allocation, or its merge into one): dispatch may reorder the
    pieces of one split bio, which are sequential all the same."""
    only = "@go && (" + " || ".join(f"args->dev == {d}" for d in devs) + ")"
    fresh = f"{only} && @stop == 0"  # new requests: none once the tracer drains
    own = f"@own[{RQ}] = {OWNER}; @own_comm[{RQ}] = comm; {NAME_UTS}"
    moved = "(uint64)args->dev, args->sector + args->nr_sector"
    keys = "$ns = $own >> 32; $dev = (uint64)args->dev; $end = args->sector + args->nr_sector;"
    follow = "@end[$ns, $dev, $op] = $end; @send[$own, $dev, $op] = $end;"
    done = "(uint64)args->dev, $sec"  # where a completion is: a flush's unset position (-1) is 0, as at its issue
    return WRITEBACK + f"""
tracepoint:block:block_getrq /{fresh}/ {{
  {WHO}
  @own[{RQ}] = $own; @own_comm[{RQ}] = $who; {NAME_UTS}
  {_op("args->rwbs")}
  if ($op < {FLUSH} && args->nr_sector > 0) {{
    {keys}
    if (@end[$ns, $dev, $op] == args->sector) {{ @seq[$ns, $dev, $op] = count(); }}
    if (@send[$own, $dev, $op] == args->sector) {{ @sseq[$own, $dev, $op, $who] = count(); }}
    if (@wbino[tid] == 0) {{ @stid[$own, $dev, $op, (uint64)tid] = count(); }}
    {follow}
  }}
}}
tracepoint:block:block_bio_backmerge /{fresh}/ {{
  {_op("args->rwbs")}
  if ($op < {FLUSH} && args->nr_sector > 0) {{ {WHO} {keys} {follow} }}
}}
tracepoint:block:block_bio_frontmerge /{fresh}/ {{
  {_op("args->rwbs")}
  if ($op < {FLUSH} && args->nr_sector > 0) {{ {WHO} {keys} {follow} }}
  if (@own[{moved}]) {{
    @own[{RQ}] = @own[{moved}]; @own_comm[{RQ}] = @own_comm[{moved}];
    delete(@own[{moved}]); delete(@own_comm[{moved}]);
  }}
}}
tracepoint:block:block_rq_merge /{only}/ {{ delete(@own[{RQ}]); delete(@own_comm[{RQ}]); }}
tracepoint:block:block_rq_issue /{only}/ {{
  {_op("args->rwbs")}
  if ($op < 3 && (@stop == 0 || @rqd[{RQ}])) {{
    $dev = (uint64)args->dev;
    if (@rqd[{RQ}]) {{ delete(@rqd[{RQ}]); }}
    else {{
      if (@tow[{RQ}]) {{ @lost[@tow[{RQ}] >> 32, $dev, @top[{RQ}]] = count(); @qd[@tow[{RQ}] >> 32, $dev] = count(); }}
      if (@own[{RQ}] == 0) {{ {own} }}
      $own = @own[{RQ}]; $comm = @own_comm[{RQ}]; $ns = $own >> 32;
      @tow[{RQ}] = $own; @tcomm[{RQ}] = $comm; @top[{RQ}] = $op;
      @rq[$ns, $dev, $op] = count(); @by[$ns, $dev, $op] = sum(args->bytes); @sz[$ns, $dev, $op] = hist(args->bytes);
      @srq[$own, $dev, $op, $comm] = count(); @sby[$own, $dev, $op, $comm] = sum(args->bytes);
      @ssz[$own, $dev, $op, $comm] = hist(args->bytes);
      if (args->bytes > {METADATA_MAX} || !{_metadata("args->rwbs")}) {{ {WINDOW} }}
    }}
    @t0[{RQ}] = nsecs; @qi[@tow[{RQ}] >> 32, $dev] = count();
  }}
}}
tracepoint:block:block_rq_requeue /{only}/ {{
  if (@t0[{RQ}]) {{ @qd[@tow[{RQ}] >> 32, (uint64)args->dev] = count(); @rqd[{RQ}] = 1; delete(@t0[{RQ}]); }}
}}
tracepoint:block:block_rq_complete /{only}/ {{
  {_op("args->rwbs")}
  $sec = args->sector;
  if (args->sector + 1 == 0) {{ $sec = 0; }}
  if (@t0[{done}] && @top[{done}] == $op) {{
    $own = @tow[{done}]; $lat = (nsecs - @t0[{done}]) / 1000;
    @lat[$own >> 32, (uint64)args->dev, $op] = hist($lat);
    @sbusy[$own, (uint64)args->dev, $op, @tcomm[{done}]] = sum($lat);
    @qd[$own >> 32, (uint64)args->dev] = count();
    delete(@t0[{done}]); delete(@top[{done}]); delete(@tow[{done}]); delete(@tcomm[{done}]);
  }}
  if ($op != {FLUSH}) {{ delete(@own[{RQ}]); delete(@own_comm[{RQ}]); }}
}}
"""


# (system call, op, where its transfer starts in the file)
_CALLS = (("read", READ, "$f->f_pos"), ("readv", READ, "$f->f_pos"), ("pread64", READ, "args->pos"),
          ("preadv", READ, "args->pos_l"), ("write", WRITE, "$f->f_pos"), ("writev", WRITE, "$f->f_pos"),
          ("pwrite64", WRITE, "args->pos"), ("pwritev", WRITE, "args->pos_l"), ("fsync", FLUSH, "0"),
          ("fdatasync", FLUSH, "0"))


def _vfs(devs: list[int]) -> str:
    only = " || ".join(f"$dev == {d}" for d in devs)
    entries = "".join(f"""
tracepoint:syscalls:sys_enter_{call} /@go && @stop == 0/ {{
  $t = curtask;
  if ((uint64)args->fd < (uint64)$t->files->fdt->max_fds) {{
    $f = *($t->files->fdt->fd + args->fd);
    $dev = (uint64)$f->f_inode->i_sb->s_dev;
    if ({only}) {{
      @vt[tid] = nsecs; @vop[tid] = {op}; @vdev[tid] = $dev; @vpos[tid] = (uint64){pos};
      @vino[tid] = (uint64)$f->f_inode->i_ino; @qi[{NS}, $dev] = count();
    }}
  }}
}}""" for call, op, pos in _CALLS)
    exits = ",\n".join(f"tracepoint:syscalls:sys_exit_{call}" for call, _, _ in _CALLS)
    return entries + f"""
{exits} /@vt[tid]/ {{
  $own = {OWNER}; $ns = $own >> 32; $dev = @vdev[tid]; $op = @vop[tid];
  {NAME_UTS}
  @qd[$ns, $dev] = count();
  if (args->ret > 0 || ($op == {FLUSH} && args->ret == 0)) {{
    $n = (uint64)args->ret; $lat = (nsecs - @vt[tid]) / 1000; $pos = @vpos[tid]; $ino = @vino[tid];
    @rq[$ns, $dev, $op] = count(); @by[$ns, $dev, $op] = sum($n); @sz[$ns, $dev, $op] = hist($n);
    @lat[$ns, $dev, $op] = hist($lat);
    @srq[$own, $dev, $op, comm] = count(); @sby[$own, $dev, $op, comm] = sum($n); @ssz[$own, $dev, $op, comm] = hist($n);
    @sbusy[$own, $dev, $op, comm] = sum($lat); @stid[$own, $dev, $op, (uint64)tid] = count(); {WINDOW}
    if ($op != {FLUSH}) {{
      if (@vend_ino[$ns, $dev, $op] == $ino && @end[$ns, $dev, $op] == $pos) {{ @seq[$ns, $dev, $op] = count(); }}
      @end[$ns, $dev, $op] = $pos + $n; @vend_ino[$ns, $dev, $op] = $ino;
      if (@sino[$own, $dev, $op] == $ino && @send[$own, $dev, $op] == $pos) {{ @sseq[$own, $dev, $op, comm] = count(); }}
      @send[$own, $dev, $op] = $pos + $n; @sino[$own, $dev, $op] = $ino;
    }}
  }}
  delete(@vt[tid]); delete(@vop[tid]); delete(@vdev[tid]); delete(@vpos[tid]); delete(@vino[tid]);
}}
"""


def program(targets: list[Target], mark: int | None = None, files: list[int] | None = None,
            drain: int | None = None) -> str:
    """The program for one host's targets (at least one); `mark` is the run's work mark
    (launch/heartbeat.new_mark), None where nothing marks its work; `files` the kernel s_dev of
    the data paths' filesystems, whose files the work's closes count (none: no file sizes);
    `drain` the number whose getpgid() makes the tracer drain (a number no pid reaches; None:
    it counts to its end)."""
    block = sorted({t.dev for t in targets if t.level == "block"})
    vfs = sorted({t.dev for t in targets if t.level == "vfs"})
    helpers = sorted(set((_BLOCK_HELPERS if block else ()) + (_VFS_HELPERS if vfs else ())))
    counted = _files(sorted(set(files))) if files and mark is not None else ""
    results = RESULT_MAPS + (BLOCK_RESULT_MAPS if block else ()) + (FILE_RESULT_MAPS if counted else ())
    prints = " ".join(f"print({m});" for m in results)
    clears = " ".join(f"clear({m});" for m in dict.fromkeys(results + SAMPLED_MAPS[1:] + tuple(helpers) + ("@go", "@stop")))
    sampled = " ".join(f"print({m});" for m in SAMPLED_MAPS)
    marks = "" if mark is None else \
        f"tracepoint:syscalls:sys_enter_getpgid /args->pid == {int(mark)}/ {{ @work[pid] = 1; }}\n"
    stop = "BEGIN { @stop = 0; }\n" if drain is None else \
        f"tracepoint:syscalls:sys_enter_getpgid /args->pid == {int(drain)}/ {{ @stop = 1; }}\n"
    return (stop + marks + FOLLOW_WORK + (_block(block) if block else "") + (_vfs(vfs) if vfs else "") + counted + f"""
interval:ms:{SAMPLE_MS} {{
  if (@go == 0) {{ @go = 1; printf("{READY_MARK} %llu\\n", elapsed / 1000000); }}
  else {{
    if (@stop) {{ printf("%llu {DRAIN_MARK}\\n", elapsed / 1000000); }} else {{ printf("%llu\\n", elapsed / 1000000); }}
    {sampled}
  }}
}}
END {{ {prints} printf("{END_MARK} %llu\\n", elapsed / 1000000); {clears} }}
""")
