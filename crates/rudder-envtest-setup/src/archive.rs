//! Unpacking an envtest archive: `controller-tools/envtest/{etcd,kube-apiserver,kubectl}`
//! out of a gzipped tar, by name, and nothing else.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::BufReader;
use std::path::{Component as PathPart, Path};

use flate2::read::GzDecoder;

use crate::cache::make_executable;
use crate::component::{ETCD, KUBE_APISERVER, KUBECTL, REQUIRED};
use crate::error::{Error, Result};

/// The directory inside the archive that holds the binaries.
const PREFIX: [&str; 2] = ["controller-tools", "envtest"];

/// Writes the archive's `etcd`, `kube-apiserver` and (when present) `kubectl` into `into`,
/// executable. Any other entry is skipped, so an entry's path never decides where a file is
/// written. `url` names the archive in errors.
pub(crate) fn unpack(archive: &Path, into: &Path, url: &str) -> Result<()> {
    let bad = |reason: String| Error::Archive {
        url: url.to_owned(),
        reason,
    };
    let file = File::open(archive).map_err(|e| Error::io("read", archive, e))?;
    let mut tar = tar::Archive::new(GzDecoder::new(BufReader::new(file)));
    let mut found = BTreeSet::new();
    for entry in tar.entries().map_err(|e| bad(e.to_string()))? {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(|e| bad(e.to_string()))?;
        let Some(name) = binary_name(&path) else {
            continue;
        };
        let dest = into.join(name);
        let mut out = File::create(&dest).map_err(|e| Error::io("create", &dest, e))?;
        std::io::copy(&mut entry, &mut out).map_err(|e| bad(format!("{name}: {e}")))?;
        out.sync_all().map_err(|e| Error::io("write", &dest, e))?;
        make_executable(&dest)?;
        found.insert(name);
    }
    match REQUIRED.iter().find(|name| !found.contains(*name)) {
        Some(name) => Err(bad(format!("it holds no {}/{name}", PREFIX.join("/")))),
        None => Ok(()),
    }
}

/// `etcd` for `controller-tools/envtest/etcd` (or `./controller-tools/...`); `None` for
/// anything else.
fn binary_name(path: &Path) -> Option<&'static str> {
    let parts: Vec<&str> = path
        .components()
        .filter(|p| !matches!(p, PathPart::CurDir))
        .map(|p| match p {
            PathPart::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [a, b, name] if [*a, *b] == PREFIX => [ETCD, KUBE_APISERVER, KUBECTL]
            .into_iter()
            .find(|known| known == name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    fn tarball(dir: &Path, entries: &[(&str, &[u8])]) -> PathBuf {
        let path = dir.join("envtest.tar.gz");
        let gz = GzEncoder::new(File::create(&path).unwrap(), Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, name, *data).unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap();
        path
    }

    fn tmp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("envtest-archive-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("out")).unwrap();
        dir
    }

    #[test]
    fn unpacks_the_binaries_by_name_and_nothing_else() {
        let dir = tmp("good");
        let archive = tarball(
            &dir,
            &[
                ("controller-tools/envtest/etcd", b"etcd"),
                ("./controller-tools/envtest/kube-apiserver", b"apiserver"),
                ("controller-tools/envtest/kubectl", b"kubectl"),
                ("controller-tools/envtest/README", b"readme"),
                ("controller-tools/other/etcd", b"elsewhere"),
                ("etcd", b"top level"),
            ],
        );
        let out = dir.join("out");
        unpack(&archive, &out, "u").unwrap();
        let mut names: Vec<_> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["etcd", "kube-apiserver", "kubectl"]);
        assert_eq!(fs::read(out.join("etcd")).unwrap(), b"etcd");
        assert_eq!(fs::read(out.join("kube-apiserver")).unwrap(), b"apiserver");
        assert!(crate::cache::is_executable(&out.join("kubectl")));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_archive_without_the_api_server_is_refused() {
        let dir = tmp("incomplete");
        let archive = tarball(&dir, &[("controller-tools/envtest/etcd", b"etcd")]);
        let err = unpack(&archive, &dir.join("out"), "https://x/a.tar.gz").unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot unpack https://x/a.tar.gz: it holds no controller-tools/envtest/kube-apiserver"
        );
        fs::write(&archive, b"not gzip at all").unwrap();
        assert!(matches!(
            unpack(&archive, &dir.join("out"), "u"),
            Err(Error::Archive { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn paths_that_climb_out_are_not_binaries() {
        for path in [
            "../controller-tools/envtest/etcd",
            "/controller-tools/envtest/etcd",
            "controller-tools/envtest/../etcd",
            "controller-tools/envtest/sub/etcd",
        ] {
            assert_eq!(binary_name(Path::new(path)), None, "{path}");
        }
        assert_eq!(
            binary_name(Path::new("controller-tools/envtest/etcd")),
            Some("etcd")
        );
    }
}
