//! The C header `include/uapi/rdma/rmlx5-abi.h` and this crate describe the
//! same ABI: every struct has the same size and the same fields at the same
//! offsets, in the same order, and every number (ioctl commands, mmap kinds,
//! enum values) is equal. The test compiles a C program against the header
//! that prints what the compiler computed, and compares.

use core::mem::{offset_of, size_of};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command as Proc;

use rmlx5_abi::ioctl::Command;
use rmlx5_abi::mmap::{self, Kind};
use rmlx5_abi::uapi::*;

/// (C struct name, Rust size, [(field, Rust offset)]).
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

macro_rules! layout {
    ($ty:ty, $c:literal, [$($f:ident),* $(,)?]) => {
        ($c, size_of::<$ty>(), vec![$((stringify!($f), offset_of!($ty, $f))),*])
    };
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(CmdHdr, "rmlx5_cmd_hdr", [size, flags]),
        layout!(
            QueryDevice,
            "rmlx5_query_device",
            [
                hdr,
                fw_ver,
                node_guid,
                sys_image_guid,
                max_mr_size,
                page_size_cap,
                vendor_id,
                vendor_part_id,
                hw_ver,
                max_qp,
                max_qp_wr,
                max_sge,
                max_cq,
                max_cqe,
                max_mr,
                max_pd,
                max_qp_rd_atom,
                max_qp_init_rd_atom,
                atomic_cap,
                num_comp_vectors,
                max_inline_data,
                phys_port_cnt,
                bf_reg_size,
                uar_size,
                device_index,
                device_flags
            ]
        ),
        layout!(
            QueryPort,
            "rmlx5_query_port",
            [
                hdr,
                port_num,
                state,
                max_mtu,
                active_mtu,
                lid,
                sm_lid,
                port_cap_flags,
                gid_tbl_len,
                active_width,
                active_speed,
                link_layer,
                reserved
            ]
        ),
        layout!(AllocPd, "rmlx5_alloc_pd", [hdr, pd_handle, pdn]),
        layout!(
            Destroy,
            "rmlx5_destroy",
            [
                hdr,
                handle,
                reserved,
                comp_events_reported,
                async_events_reported
            ]
        ),
        layout!(
            RegMr,
            "rmlx5_reg_mr",
            [hdr, addr, length, iova, pd_handle, access, mr_handle, lkey, rkey, reserved]
        ),
        layout!(
            CreateCompChannel,
            "rmlx5_create_comp_channel",
            [hdr, fd, reserved]
        ),
        layout!(
            CreateCq,
            "rmlx5_create_cq",
            [
                hdr,
                user_handle,
                cqe,
                channel_fd,
                comp_vector,
                cq_handle,
                cqn,
                cqe_cnt,
                cqe_size,
                reserved,
                buf_mmap_offset,
                buf_size,
                dbr_mmap_offset
            ]
        ),
        layout!(
            CreateQp,
            "rmlx5_create_qp",
            [
                hdr,
                user_handle,
                pd_handle,
                send_cq_handle,
                recv_cq_handle,
                qp_type,
                max_send_wr,
                max_recv_wr,
                max_send_sge,
                max_recv_sge,
                max_inline_data,
                sq_sig_all,
                qp_handle,
                qpn,
                sq_wqe_cnt,
                sq_wqe_shift,
                rq_wqe_cnt,
                rq_wqe_shift,
                max_send_wr_out,
                max_recv_wr_out,
                max_send_sge_out,
                max_recv_sge_out,
                max_inline_data_out,
                bf_size,
                bf_offset,
                rq_buf_offset,
                sq_buf_offset,
                reserved,
                buf_mmap_offset,
                buf_size,
                dbr_mmap_offset,
                uar_mmap_offset
            ]
        ),
        layout!(
            ModifyQp,
            "rmlx5_modify_qp",
            [
                hdr,
                qp_handle,
                attr_mask,
                qp_state,
                cur_qp_state,
                path_mtu,
                dest_qp_num,
                rq_psn,
                sq_psn,
                qp_access_flags,
                max_rd_atomic,
                max_dest_rd_atomic,
                min_rnr_timer,
                timeout,
                retry_cnt,
                rnr_retry,
                port_num,
                dlid,
                sl
            ]
        ),
        layout!(
            QueryQp,
            "rmlx5_query_qp",
            [
                hdr,
                qp_handle,
                reserved,
                qp_state,
                path_mtu,
                dest_qp_num,
                rq_psn,
                sq_psn,
                qp_access_flags,
                max_rd_atomic,
                max_dest_rd_atomic,
                min_rnr_timer,
                timeout,
                retry_cnt,
                rnr_retry,
                port_num,
                dlid,
                max_send_wr,
                max_recv_wr,
                max_send_sge,
                max_recv_sge,
                max_inline_data,
                sl
            ]
        ),
        layout!(
            Kick,
            "rmlx5_kick",
            [hdr, kind, handle, uar_offset, reserved]
        ),
        layout!(GetAsyncFd, "rmlx5_get_async_fd", [hdr, fd, reserved]),
        layout!(
            AsyncEvent,
            "rmlx5_async_event",
            [element, event_type, reserved]
        ),
    ]
}

fn numbers() -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = Vec::new();
    let cmd_names = [
        (Command::QueryDevice, "QUERY_DEVICE"),
        (Command::QueryPort, "QUERY_PORT"),
        (Command::AllocPd, "ALLOC_PD"),
        (Command::DeallocPd, "DEALLOC_PD"),
        (Command::RegMr, "REG_MR"),
        (Command::DeregMr, "DEREG_MR"),
        (Command::CreateCompChannel, "CREATE_COMP_CHANNEL"),
        (Command::CreateCq, "CREATE_CQ"),
        (Command::DestroyCq, "DESTROY_CQ"),
        (Command::CreateQp, "CREATE_QP"),
        (Command::ModifyQp, "MODIFY_QP"),
        (Command::QueryQp, "QUERY_QP"),
        (Command::DestroyQp, "DESTROY_QP"),
        (Command::Kick, "KICK"),
        (Command::GetAsyncFd, "GET_ASYNC_FD"),
    ];
    assert_eq!(
        cmd_names.len(),
        Command::ALL.len(),
        "a command is missing here"
    );
    for (c, name) in cmd_names {
        v.push((format!("RMLX5_IOCTL_{name}"), u64::from(c.cmd())));
    }
    let plain: &[(&str, u64)] = &[
        ("RMLX5_IOCTL_MAGIC", u64::from(rmlx5_abi::ioctl::MAGIC)),
        ("RMLX5_IOCTL_NR_BASE", u64::from(rmlx5_abi::ioctl::NR_BASE)),
        ("RMLX5_COMP_EVENT_SIZE", COMP_EVENT_SIZE as u64),
        ("RMLX5_MMAP_PAGE_SHIFT", u64::from(mmap::PAGE_SHIFT)),
        ("RMLX5_MMAP_KIND_SHIFT", u64::from(mmap::KIND_SHIFT)),
        ("RMLX5_MMAP_UAR", Kind::Uar as u64),
        ("RMLX5_MMAP_CQ_BUF", Kind::CqBuf as u64),
        ("RMLX5_MMAP_CQ_DBR", Kind::CqDbr as u64),
        ("RMLX5_MMAP_QP_BUF", Kind::QpBuf as u64),
        ("RMLX5_MMAP_QP_DBR", Kind::QpDbr as u64),
        ("RMLX5_QPT_RC", u64::from(QPT_RC)),
        ("RMLX5_QPS_RESET", u64::from(QPS_RESET)),
        ("RMLX5_QPS_INIT", u64::from(QPS_INIT)),
        ("RMLX5_QPS_RTR", u64::from(QPS_RTR)),
        ("RMLX5_QPS_RTS", u64::from(QPS_RTS)),
        ("RMLX5_QPS_SQD", u64::from(QPS_SQD)),
        ("RMLX5_QPS_SQE", u64::from(QPS_SQE)),
        ("RMLX5_QPS_ERR", u64::from(QPS_ERR)),
        ("RMLX5_QP_STATE", u64::from(QP_STATE)),
        ("RMLX5_QP_CUR_STATE", u64::from(QP_CUR_STATE)),
        ("RMLX5_QP_ACCESS_FLAGS", u64::from(QP_ACCESS_FLAGS)),
        ("RMLX5_QP_PKEY_INDEX", u64::from(QP_PKEY_INDEX)),
        ("RMLX5_QP_PORT", u64::from(QP_PORT)),
        ("RMLX5_QP_AV", u64::from(QP_AV)),
        ("RMLX5_QP_PATH_MTU", u64::from(QP_PATH_MTU)),
        ("RMLX5_QP_TIMEOUT", u64::from(QP_TIMEOUT)),
        ("RMLX5_QP_RETRY_CNT", u64::from(QP_RETRY_CNT)),
        ("RMLX5_QP_RNR_RETRY", u64::from(QP_RNR_RETRY)),
        ("RMLX5_QP_RQ_PSN", u64::from(QP_RQ_PSN)),
        ("RMLX5_QP_MAX_QP_RD_ATOMIC", u64::from(QP_MAX_QP_RD_ATOMIC)),
        ("RMLX5_QP_MIN_RNR_TIMER", u64::from(QP_MIN_RNR_TIMER)),
        ("RMLX5_QP_SQ_PSN", u64::from(QP_SQ_PSN)),
        (
            "RMLX5_QP_MAX_DEST_RD_ATOMIC",
            u64::from(QP_MAX_DEST_RD_ATOMIC),
        ),
        ("RMLX5_QP_DEST_QPN", u64::from(QP_DEST_QPN)),
        ("RMLX5_ACCESS_LOCAL_WRITE", u64::from(ACCESS_LOCAL_WRITE)),
        ("RMLX5_ACCESS_REMOTE_WRITE", u64::from(ACCESS_REMOTE_WRITE)),
        ("RMLX5_ACCESS_REMOTE_READ", u64::from(ACCESS_REMOTE_READ)),
        (
            "RMLX5_ACCESS_REMOTE_ATOMIC",
            u64::from(ACCESS_REMOTE_ATOMIC),
        ),
        ("RMLX5_PORT_ACTIVE", u64::from(PORT_ACTIVE)),
        (
            "RMLX5_LINK_LAYER_INFINIBAND",
            u64::from(LINK_LAYER_INFINIBAND),
        ),
        ("RMLX5_ATOMIC_HCA", u64::from(ATOMIC_HCA)),
        ("RMLX5_MTU_4096", u64::from(MTU_4096)),
        (
            "RMLX5_DEVICE_UAR_DOORBELLS",
            u64::from(DEVICE_UAR_DOORBELLS),
        ),
        ("RMLX5_KICK_SEND", u64::from(KICK_SEND)),
        ("RMLX5_KICK_SEND_BLUEFLAME", u64::from(KICK_SEND_BLUEFLAME)),
        ("RMLX5_KICK_RECV", u64::from(KICK_RECV)),
        ("RMLX5_KICK_CQ_ARM", u64::from(KICK_CQ_ARM)),
        ("RMLX5_UAR_WATCH_OFFSET", u64::from(UAR_WATCH_OFFSET)),
        (
            "RMLX5_UAR_DOORBELL_BITS_OFFSET",
            u64::from(UAR_DOORBELL_BITS_OFFSET),
        ),
        ("RMLX5_EVENT_CQ_ERR", u64::from(EVENT_CQ_ERR)),
        ("RMLX5_EVENT_QP_FATAL", u64::from(EVENT_QP_FATAL)),
        ("RMLX5_EVENT_QP_REQ_ERR", u64::from(EVENT_QP_REQ_ERR)),
        ("RMLX5_EVENT_QP_ACCESS_ERR", u64::from(EVENT_QP_ACCESS_ERR)),
        ("RMLX5_EVENT_COMM_EST", u64::from(EVENT_COMM_EST)),
        ("RMLX5_EVENT_SQ_DRAINED", u64::from(EVENT_SQ_DRAINED)),
        ("RMLX5_EVENT_DEVICE_FATAL", u64::from(EVENT_DEVICE_FATAL)),
        (
            "RMLX5_EVENT_QP_LAST_WQE_REACHED",
            u64::from(EVENT_QP_LAST_WQE_REACHED),
        ),
    ];
    v.extend(plain.iter().map(|(n, x)| (n.to_string(), *x)));
    v
}

fn header() -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../include/uapi/rdma/rmlx5-abi.h")
        .canonicalize()
        .expect("include/uapi/rdma/rmlx5-abi.h exists");
    let text = std::fs::read_to_string(&path).expect("header is readable");
    (path, text)
}

/// Field names of every `struct rmlx5_*` in the header, in order.
fn header_structs(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        let line = line.split("/*").next().unwrap_or("").trim();
        if let Some(rest) = line.strip_prefix("struct ") {
            if let Some(name) = rest.strip_suffix(" {") {
                current = Some((name.to_string(), Vec::new()));
                continue;
            }
        }
        if line == "};" {
            if let Some((name, fields)) = current.take() {
                out.insert(name, fields);
            }
            continue;
        }
        if let Some((_, fields)) = current.as_mut() {
            if let Some(decl) = line.strip_suffix(';') {
                let name = decl.split_whitespace().last().expect("a field name");
                fields.push(name.to_string());
            }
        }
    }
    out
}

/// Every object-like `#define RMLX5_*` of the header.
fn header_defines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .filter(|n| n.starts_with("RMLX5_") && !n.contains('(') && n != "RMLX5_ABI_USER_H")
        .collect()
}

#[test]
fn header_lists_the_same_structs_and_fields() {
    let (_, text) = header();
    let c = header_structs(&text);
    let rust: BTreeMap<String, Vec<String>> = layouts()
        .into_iter()
        .map(|(name, _, fields)| {
            (
                name.to_string(),
                fields.iter().map(|(f, _)| f.to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(c, rust, "struct or field lists differ between C and Rust");
}

#[test]
fn header_defines_are_all_checked() {
    let (_, text) = header();
    let checked: Vec<String> = numbers().into_iter().map(|(n, _)| n).collect();
    for name in header_defines(&text) {
        assert!(
            checked.contains(&name),
            "{name} is defined in the header but not compared with the Rust crate"
        );
    }
}

#[test]
fn compiled_header_agrees_with_rust() {
    let (path, _) = header();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rmlx5-abi-c");
    std::fs::create_dir_all(&dir).unwrap();
    let mut expected: Vec<(String, u64)> = Vec::new();
    for (name, size, fields) in layouts() {
        expected.push((format!("sizeof(struct {name})"), size as u64));
        for (f, off) in fields {
            expected.push((format!("offsetof(struct {name}, {f})"), off as u64));
        }
    }
    expected.extend(numbers());

    let mut src = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"{}\"\nint main(void)\n{{\n",
        path.display()
    );
    for (expr, _) in &expected {
        src.push_str(&format!(
            "\tprintf(\"%llu\\n\", (unsigned long long)({expr}));\n"
        ));
    }
    src.push_str("\treturn 0;\n}\n");
    let c_file = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&c_file, src).unwrap();
    let cc = Proc::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&c_file)
        .output()
        .expect("a C compiler (cc) is installed");
    assert!(
        cc.status.success(),
        "the header does not compile:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Proc::new(&exe).output().expect("the test program runs");
    let text = String::from_utf8(out.stdout).unwrap();
    let got: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(got.len(), expected.len());
    let mut bad = Vec::new();
    for ((expr, want), got) in expected.iter().zip(got) {
        if *want != got {
            bad.push(format!("{expr}: C says {got}, Rust says {want}"));
        }
    }
    assert!(bad.is_empty(), "C and Rust disagree:\n{}", bad.join("\n"));
}

#[test]
fn commands_decode_by_number() {
    for &c in Command::ALL {
        assert_eq!(Command::from_cmd(c.cmd()), Some(c));
        // A grown struct (different size bits) is still the same command.
        let grown = c.cmd() + (8 << 16);
        assert_eq!(Command::from_cmd(grown), Some(c));
        assert!(c.min_size() >= size_of::<CmdHdr>());
    }
    assert_eq!(Command::from_cmd(0), None);
    assert_eq!(Command::from_cmd(0x5401), None);
    // Right number, wrong direction.
    let c = Command::QueryDevice.cmd() & !(3 << 30) | (1 << 30);
    assert_eq!(Command::from_cmd(c), None);
}
